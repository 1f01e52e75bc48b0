"""Synchronisation building blocks of the ASHL training engine: a parameter server on TF `ps`
tasks (``ps``), schedules (``schedule``: ASHL local iterations, data shares, compression ratios, the
SHL staleness gate, the phase controller), ADSP's loss-curve fit and commit-rate search (``adsp``),
and top-k compression with error feedback (``compression``). `edgemesh_tf.engine` drives them; this
package imports nothing from it."""
