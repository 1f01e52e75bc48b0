"""docs/ARCHITECTURE.md's "where to change what" names files that exist (a path with a folder, relative
to the repository or to edgemesh_tf/), and names the kinds of change a contributor asks about first."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _section() -> str:
    text = open(os.path.join(ROOT, "docs", "ARCHITECTURE.md")).read()
    start = text.index("## 9. Where to change what")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_every_file_the_table_names_exists():
    paths = set(re.findall(r"`((?:[\w-]+/)+(?:[\w-]+\.(?:py|md|yaml|sh))?)`", _section()))
    assert len(paths) >= 15, paths
    missing = [p for p in sorted(paths) if not any(os.path.exists(os.path.join(base, p))
                                                   for base in (ROOT, os.path.join(ROOT, "edgemesh_tf")))]
    assert not missing, "docs/ARCHITECTURE.md names files that do not exist: %s" % missing


def test_the_table_covers_a_model_a_layer_kind_a_strategy_and_a_device_kind():
    rows = [line.split("|")[1].strip() for line in _section().splitlines() if line.startswith("| ")]
    for kind in ("A model (your own)", "A layer kind", "A strategy", "A kind of device"):
        assert kind in rows, rows
