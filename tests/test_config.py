from __future__ import annotations

import dataclasses
import inspect
import math
import re

import pytest

from perf_callbacks.config import PerfConfig, ScheduleConfig
from perf_callbacks.exceptions import PerfConfigError


def test_defaults_are_valid() -> None:
    cfg = PerfConfig()
    assert cfg.schedule == ScheduleConfig()
    assert PerfConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"shedule": {}}, r"unknown key 'shedule' \(did you mean 'schedule'\?\); valid keys: output_dir, schedule"),
        ({"schedule": {"actve": 2}}, r"unknown key 'schedule.actve' \(did you mean 'schedule.active'\?\)"),
        ({"schedule": {"active": 0}}, r"schedule.active must be >= 1, got 0"),
        ({"schedule": {"active": -3}}, r"schedule.active must be >= 1, got -3"),
        ({"schedule": {"wait": "2"}}, r"schedule.wait must be an integer, got '2' \(str\)"),
        ({"schedule": {"repeat": True}}, r"schedule.repeat must be an integer"),
        ({"schedule": 3}, r"schedule must be a mapping with keys"),
        ({"activities": ["cpu", "tpu"]}, r"activities must be 'cpu' and/or 'cuda', got \['cpu', 'tpu'\]: unknown 'tpu'$"),
        ({"activities": ["gpu"]}, r"activities must be 'cpu' and/or 'cuda', got \['gpu'\]: .*\(did you mean 'cuda'\?\)"),
        ({"activities": ["CUDA"]}, r"got \['CUDA'\]: unknown 'CUDA' \(did you mean 'cuda'\?\)"),
        ({"activities": ["cdua"]}, r"got \['cdua'\]: unknown 'cdua' \(did you mean 'cuda'\?\)"),
        ({"activities": ["cuda", "cuda"]}, r"activities must list each of 'cpu' and/or 'cuda' once, got \['cuda', 'cuda'\]"),
        ({"activities": []}, r"activities must be a non-empty list of 'cpu' and/or 'cuda', got \[\]; omit activities"),
        ({"max_trace_mb": "big"}, r"max_trace_mb must be int or float, got 'big' \(str\)"),
        ({"max_trace_mb": 0}, r"max_trace_mb must be a finite number > 0, got 0$"),
        ({"max_trace_mb": math.nan}, r"max_trace_mb must be a finite number > 0, got nan$"),
        ({"max_trace_mb": math.inf}, r"max_trace_mb must be a finite number > 0, got inf$"),
        ({"degradation_threshold": math.nan}, r"degradation_threshold must be a finite number > 0, got nan$"),
        ({"degradation_threshold": -math.inf}, r"degradation_threshold must be a finite number > 0, got -inf$"),
        ({"data_wait_threshold": math.nan}, r"data_wait_threshold must be a finite number in \(0, 1\], got nan$"),
        ({"data_wait_threshold": math.inf}, r"data_wait_threshold must be a finite number in \(0, 1\], got inf$"),
        ({"data_wait_threshold": 0}, r"data_wait_threshold must be a finite number in \(0, 1\], got 0$"),
        ({"data_wait_threshold": 10}, r"in \(0, 1\], got 10 \(a share, not a percentage: did you mean 0.1\?\)"),
        ({"record_shapes": "yes"}, r"record_shapes must be bool, got 'yes'"),
        ({"ranks": []}, r"ranks must be a non-empty list of global ranks >= 0, got \[\]; omit ranks \(or set it to null\)"),
        ({"ranks": [0, 0]}, r"ranks must list each global rank once, got \[0, 0\] \(repeated: \[0\]\)"),
        ({"ranks": [2, 1, 2, 1]}, r"got \[2, 1, 2, 1\] \(repeated: \[1, 2\]\)"),
        ({"ranks": [0, -1]}, r"ranks must be global ranks >= 0, got \[0, -1\]"),
        ({"ranks": ["0"]}, r"ranks must be a list of int"),
        ({"log_every_n_steps": 0}, r"log_every_n_steps must be >= 1"),
        ({"top_k": True}, r"top_k must be int, got True"),
        ({"nsys_steps": [5, 2]}, r"nsys_steps must be \[first, last\]"),
        ({"nsys_steps": [2, 5]}, r"nsys_steps \[2, 5\] does nothing without nsys_capture: true"),
        ({"nvtx_domain": ""}, r"nvtx_domain must be a non-empty string, got ''"),
        ({"flops_per_stp": 1e12}, r"unknown key 'flops_per_stp' \(did you mean 'flops_per_step'\?\)"),
        ({"peak_tflop": 989}, r"unknown key 'peak_tflop' \(did you mean 'peak_tflops'\?\)"),
        ({"flops": "no"}, r"flops must be bool, got 'no' \(str\)"),
        ({"flops_per_step": 0}, r"flops_per_step must be a finite number > 0, got 0$"),
        ({"flops_per_step": math.inf}, r"flops_per_step must be a finite number > 0, got inf$"),
        ({"flops_per_step": True}, r"flops_per_step must be int or float or None, got True"),
        ({"flops_per_step": "6e12"}, r"flops_per_step must be int or float or None, got '6e12' \(str\)"),
        ({"peak_tflops": -1.0}, r"peak_tflops must be a finite number > 0, got -1.0$"),
        ({"peak_tflops": 989e12}, r"peak_tflops is in TFLOP/s, got 989000000000000.0 \(did you mean 989\?\)"),
        ({"peak_tbps": 0}, r"peak_tbps must be a finite number > 0, got 0$"),
        ({"peak_tbps": 4.8e12}, r"peak_tbps is in TB/s, got 4800000000000.0 \(did you mean 4.8\?\)"),
    ],
)
def test_bad_config_names_the_key(options: dict[str, object], match: str) -> None:
    with pytest.raises(PerfConfigError, match=match):
        PerfConfig.from_dict(options)


def test_yaml_file_gives_the_same_config_and_messages(tmp_path) -> None:
    good = tmp_path / "perf.yaml"
    good.write_text("schedule: {skip_first: 3, active: 2, repeat: 2}\nrecord_shapes: true\nranks: [0]\n")
    cfg = PerfConfig.from_yaml(good)
    assert cfg.schedule == ScheduleConfig(skip_first=3, active=2, repeat=2)
    assert cfg.record_shapes and cfg.ranks == (0,)
    bad = tmp_path / "bad.yaml"
    bad.write_text("schedule: {active: 0}\n")
    with pytest.raises(PerfConfigError, match="schedule.active must be >= 1, got 0"):
        PerfConfig.from_yaml(bad)
    with pytest.raises(PerfConfigError, match=rf"^{re.escape(str(bad))}: schedule.active must be >= 1, got 0$"):
        PerfConfig.from_yaml(bad)
    cli_style = tmp_path / "cli.yaml"
    cli_style.write_text("class_path: perf_callbacks.GPUPerfCallback\ninit_args:\n  top_k: 7\n")
    assert PerfConfig.from_yaml(cli_style).top_k == 7


def test_lightning_callback_signature_matches_config() -> None:
    from perf_callbacks import GPUPerfCallback

    signature = inspect.signature(GPUPerfCallback.__init__).parameters
    named = [k for k, v in signature.items() if v.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD][1:]
    assert named == [f.name for f in dataclasses.fields(PerfConfig)]
    assert [v.kind for v in signature.values()][-1] is inspect.Parameter.VAR_KEYWORD  # only to name unknown keys
    defaults = {k: v.default for k, v in signature.items() if k in named}
    assert PerfConfig.from_dict({k: v for k, v in defaults.items() if k != "schedule"}) == PerfConfig()


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("schedule:\n  active: 2\n record_shapes: true\n", ":3:2", "expected <block end>, but found '<block mapping start>'"),
        ("top_k: 3\nranks: [0, 1\n", ":3:1", "expected ',' or ']', but got '<stream end>'"),
        ("schedule: {active: 2}\nschedule: active: 3\n", ":2:17", "mapping values are not allowed here"),
    ],
)
def test_yaml_syntax_error_names_the_file_and_the_line(tmp_path, text: str, where: str, problem: str) -> None:
    path = tmp_path / "perf.yaml"
    path.write_text(text)
    with pytest.raises(PerfConfigError, match=rf"^{re.escape(str(path) + where)}: invalid YAML: {re.escape(problem)}"):
        PerfConfig.from_yaml(path)


def test_yaml_numbers_read_as_lightningcli_reads_them(tmp_path) -> None:
    """YAML 1.1 (PyYAML) reads 1e3 as a string; YAML 1.2 and jsonargparse read a number: we read a number."""
    path = tmp_path / "perf.yaml"
    path.write_text("max_trace_mb: 1e3\ndegradation_threshold: 5E-1\ndata_wait_threshold: .25\ntop_k: 7\n")
    cfg = PerfConfig.from_yaml(path)
    assert (cfg.max_trace_mb, cfg.degradation_threshold, cfg.data_wait_threshold, cfg.top_k) == (1000.0, 0.5, 0.25, 7)
    path.write_text("output_dir: 1e3x\n")  # not a number: stays text
    assert PerfConfig.from_yaml(path).output_dir == "1e3x"


def test_flops_keys_from_yaml(tmp_path) -> None:
    path = tmp_path / "perf.yaml"
    path.write_text("flops_per_step: 6.2e12\npeak_tflops: 989\nflops: false\n")
    cfg = PerfConfig.from_yaml(path)
    assert (cfg.flops_per_step, cfg.peak_tflops, cfg.flops) == (6.2e12, 989, False)
    assert PerfConfig().flops and PerfConfig().flops_per_step is None and PerfConfig().peak_tflops is None


def test_a_duplicate_key_is_an_error_not_the_last_one_silently(tmp_path) -> None:
    path = tmp_path / "perf.yaml"
    path.write_text("top_k: 3\nschedule: {active: 2}\ntop_k: 5\n")
    with pytest.raises(PerfConfigError, match=rf"^{re.escape(str(path))}:3:1: invalid YAML: duplicate key 'top_k'"):
        PerfConfig.from_yaml(path)


def test_a_file_that_cannot_be_read_is_a_config_error(tmp_path) -> None:
    binary = tmp_path / "perf.yaml"
    binary.write_bytes(b"top_k: \xff\xfe\n")
    with pytest.raises(PerfConfigError, match="cannot read the config file: UnicodeDecodeError"):
        PerfConfig.from_yaml(binary)
    with pytest.raises(PerfConfigError, match="cannot read the config file: Is a directory"):
        PerfConfig.from_yaml(tmp_path)
    with pytest.raises(PerfConfigError, match="cannot read the config file: No such file or directory"):
        PerfConfig.from_yaml(tmp_path / "missing.yaml")


UNKNOWN = (
    "unknown key 'record_shape' (did you mean 'record_shapes'?); valid keys: output_dir, schedule, activities, "
    "record_shapes, "
)


def test_constructors_reject_unknown_keywords_with_the_yaml_message(tmp_path) -> None:
    from perf_callbacks import AcceleratePerfHook, GPUPerfCallback

    path = tmp_path / "perf.yaml"
    path.write_text("record_shape: true\n")
    with pytest.raises(PerfConfigError) as from_yaml:
        PerfConfig.from_yaml(path)
    with pytest.raises(PerfConfigError) as lightning:
        GPUPerfCallback(record_shape=True)
    with pytest.raises(PerfConfigError) as accelerate:
        AcceleratePerfHook(record_shape=True)
    assert str(from_yaml.value) == f"{path}: {lightning.value}"
    assert str(lightning.value) == str(accelerate.value)
    assert str(lightning.value).startswith(UNKNOWN)
    assert str(lightning.value).endswith(", top_k, flops, flops_per_step, peak_tflops, peak_tbps, "
                                         "memory_history, memory_history_start, storage_options, hang_timeout, "
                                         "capture_on_anomaly, capture_max_per_hour, capture_signal, capture_poll_s, "
                                         "capture_signal_all_ranks")
    with pytest.raises(PerfConfigError, match=r"unknown key 'schedule.actve' \(did you mean 'schedule.active'\?\)"):
        GPUPerfCallback(schedule={"actve": 2})


def test_the_constructor_takes_what_the_callbacks_take() -> None:
    """``PerfConfig(...)`` with the README's values: a schedule mapping and lists (it said "schedule must be a
    mapping, got dict"), the same config as the callbacks build from those keys."""
    from perf_callbacks import GPUPerfCallback

    options = {"schedule": {"skip_first": 5, "active": 2}, "ranks": [0], "activities": ["cpu"],
               "nsys_steps": [6, 7], "nsys_capture": True}
    cfg = PerfConfig(**options)  # type: ignore[arg-type]
    assert cfg == PerfConfig.from_dict(options) == GPUPerfCallback(**options).config
    assert (cfg.schedule.skip_first, cfg.schedule.active, cfg.ranks, cfg.activities) == (5, 2, (0,), ("cpu",))
    assert PerfConfig(schedule=None) == PerfConfig()  # type: ignore[arg-type]
    assert PerfConfig(**cfg.to_dict()) == cfg
    with pytest.raises(PerfConfigError, match=r"unknown key 'schedule.actve' \(did you mean 'schedule.active'\?\)"):
        PerfConfig(schedule={"actve": 2})  # type: ignore[arg-type]


@pytest.mark.parametrize(("options", "match"), [
    ({"schedule": 3}, r"schedule must be a mapping with keys"),
    ({"schedule": {"active": 0}}, r"schedule.active must be >= 1, got 0"),
    ({"ranks": [0, 0]}, r"ranks must list each global rank once, got \[0, 0\]"),
    ({"activities": ["gpu"]}, r"got \['gpu'\]: .*\(did you mean 'cuda'\?\)"),
    ({"nsys_steps": [5, 2]}, r"nsys_steps must be \[first, last\]"),
])
def test_the_constructor_rejects_what_the_callbacks_reject(options: dict[str, object], match: str) -> None:
    with pytest.raises(PerfConfigError, match=match):
        PerfConfig(**options)  # type: ignore[arg-type]


def test_storage_options_is_a_mapping_passed_through() -> None:
    cfg = PerfConfig.from_dict({"output_dir": "s3://bucket/perf", "storage_options": {"anon": False}})
    assert cfg.storage_options == {"anon": False}
    with pytest.raises(PerfConfigError, match=r"storage_options must be a mapping of fsspec options, got 'key=1'"):
        PerfConfig(storage_options="key=1")  # type: ignore[arg-type]


def test_flops_options_take_a_number_of_any_numeric_type_and_refuse_non_finite_ones() -> None:
    import numpy as np
    import torch

    assert PerfConfig(flops_per_step=np.int64(10**9)).flops_per_step == 1e9
    assert PerfConfig(flops_per_step=torch.tensor(2e9), peak_tflops=np.float32(312)).peak_tflops == 312.0
    for bad in (float("inf"), float("nan"), -1.0, np.float64("inf"), torch.tensor(float("nan"))):
        with pytest.raises(PerfConfigError, match="^flops_per_step must be a finite number > 0, got ") as err:
            PerfConfig(flops_per_step=bad)
        assert "\n" not in str(err.value)
