"""The tbf bucket and the veth segment size of an emulated link (pure functions, no root)."""
from edgemesh_tf.cluster import netns


def test_bucket_is_four_packets_or_two_ms():
    assert netns.tbf_burst_bytes(10) == 4 * netns.FRAME_BYTES  # 2 ms at 10 Mbit/s is only 2,500 bytes
    assert netns.tbf_burst_bytes(1000) == 250000  # 2 ms at 1 Gbit/s
    args = netns.tbf_args(1000)
    assert args[:3] == ["tbf", "rate", "1000000kbit"]
    assert int(args[args.index("burst") + 1]) == 250000
    assert int(args[args.index("limit") + 1]) == 250000 + 6250000  # + 50 ms of queue


def test_segments_fit_a_quarter_of_the_bucket_between_one_frame_and_64_kib():
    # Slow links keep one-frame segments: a 64 KiB segment would pass 52 ms of a 10 Mbit/s link at once.
    assert netns.gso_max_bytes(10) == netns.gso_max_bytes(20) == netns.FRAME_BYTES
    assert netns.gso_max_bytes(100) == 25000 // 4
    # Fast links get large segments: at one frame this host's veths carry only ~1 Gbit/s unshaped.
    assert netns.gso_max_bytes(1000) == 62500
    assert netns.gso_max_bytes(10000) == netns.gso_max_bytes(None) == netns.GSO_MAX_BYTES
    for rate in (1, 10, 50, 100, 200, 1000, 5000):
        assert 4 * netns.gso_max_bytes(rate) <= netns.tbf_burst_bytes(rate)


def test_a_medium_members_segments_fit_the_slower_of_its_link_and_its_medium():
    own = netns.link_for("r1", 0, 0, "w0", 1000.0)
    shared = netns.link_for("r1", 0, 1, "w1", 1000.0, medium_mbit=40.0)
    unshaped = netns.link_for("r1", 0, 2, "ps0", None)
    assert own.gso_max_bytes == 62500
    assert shared.gso_max_bytes == netns.gso_max_bytes(40.0) == 2500
    assert unshaped.gso_max_bytes == netns.GSO_MAX_BYTES
