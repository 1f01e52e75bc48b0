"""Imports a module of the bench package for the tests (``load("stats")`` is ``bench.stats``)."""
import importlib


def load(name: str):
    return importlib.import_module("bench." + name)
