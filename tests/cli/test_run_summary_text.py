"""The summary `edgemesh run` prints says where a run started from and where its export went (or why
the export failed, and where the trained model is); pure text from the summary dict."""
from edgemesh_tf.cli.run import summary_text

SUMMARY = {"model": "/m/cnn.keras", "dataset": "digits32", "strategy": "ashl", "cluster": "layouts/pi4.yaml",
           "testbed": {"network": "netns", "compute": "cgroup-v1"}, "target_accuracy": 0.9, "time_to_target_s": 50.0,
           "why": "target accuracy 0.900 reached", "accuracy": 0.91, "train_s": 51.0, "setup_s": 80.0,
           "phase_transitions": [["profiling", 0, 0.0], ["ahl", 40, 1.7]], "examples_per_sec": 900.0,
           "global_steps": 100, "bytes_sent": 1e6, "devices": {}, "idle_devices": [], "plan": "run/plan.yaml",
           "planned": {"kind": "grid", "predicted_examples_per_sec": 941.0, "best_alternative": None, "splits": {}},
           "group_time": {}, "profile": "run/profile.json", "logdir": "run", "tensorboard": "tensorboard --logdir run/tb"}


def test_the_summary_names_the_start_weights_and_the_export():
    text = summary_text(dict(SUMMARY, initial_weights="/m/cnn.keras", export={
        "keras": "out/model.keras", "saved_model": "out/saved_model", "keras_accuracy": 0.9123}))
    assert "started from the weights in /m/cnn.keras" in text
    assert "exported: out/model.keras (test accuracy by plain Keras 0.9123), SavedModel out/saved_model" in text


def test_a_failed_export_says_why_and_where_the_trained_model_is():
    text = summary_text(dict(SUMMARY, initial_weights=None, export={"error": "export of x to y failed: disk full"}))
    assert "not exported: export of x to y failed: disk full (the trained model is in run/final_model)" in text
    assert "started from" not in text and "\nexported:" not in text


def test_each_device_shows_its_predicted_memory_beside_its_peak_while_training():
    devices = {"jetson0": {"group": "g0", "examples_per_sec": 90.0, "compute_gflops": 1.6, "utilisation": 1.0,
                           "predicted_memory_mib": 200.0, "peak_memory_mib": 300.0},
               "pi1": {"group": "g0", "examples_per_sec": 90.0, "compute_gflops": 1.0, "utilisation": 1.0,
                       "predicted_memory_mib": 150.0},  # a real device: no peak read
               "pi2": {"group": "g0", "examples_per_sec": 90.0, "compute_gflops": 1.0, "utilisation": 1.0}}
    text = summary_text(dict(SUMMARY, devices=devices))
    assert "memory MiB: predicted -> peak while training" in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ") and "%" in line}
    assert rows["jetson0"].endswith("200 -> 300 (x1.50)")
    assert rows["pi1"].endswith("150 -> -") and rows["pi2"].endswith("%  -")
