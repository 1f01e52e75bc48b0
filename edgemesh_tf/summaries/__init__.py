"""TensorBoard output: scalar/text/image/hparams writers and the layout view (picture + table)."""
