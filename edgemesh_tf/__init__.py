"""edgemesh_tf: uneven mesh sharding and hybrid training for heterogeneous edge clusters."""
__version__ = "0.1.0"
