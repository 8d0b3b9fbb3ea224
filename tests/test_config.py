from __future__ import annotations

import dataclasses
import inspect

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
        ({"activities": ["cpu", "tpu"]}, r"activities must be a non-empty list of \['cpu', 'cuda'\], got \['tpu'\]"),
        ({"activities": []}, r"activities must be a non-empty list"),
        ({"max_trace_mb": "big"}, r"max_trace_mb must be int or float, got 'big' \(str\)"),
        ({"max_trace_mb": 0}, r"max_trace_mb must be > 0"),
        ({"record_shapes": "yes"}, r"record_shapes must be bool, got 'yes'"),
        ({"ranks": [0, -1]}, r"ranks must be global ranks >= 0"),
        ({"ranks": ["0"]}, r"ranks must be a list of int"),
        ({"log_every_n_steps": 0}, r"log_every_n_steps must be >= 1"),
        ({"top_k": True}, r"top_k must be int, got True"),
        ({"nsys_steps": [5, 2]}, r"nsys_steps must be \[first, last\]"),
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
    cli_style = tmp_path / "cli.yaml"
    cli_style.write_text("class_path: perf_callbacks.GPUPerfCallback\ninit_args:\n  top_k: 7\n")
    assert PerfConfig.from_yaml(cli_style).top_k == 7


def test_lightning_callback_signature_matches_config() -> None:
    from perf_callbacks import GPUPerfCallback

    params = list(inspect.signature(GPUPerfCallback.__init__).parameters)[1:]
    assert params == [f.name for f in dataclasses.fields(PerfConfig)]
    defaults = {k: v.default for k, v in inspect.signature(GPUPerfCallback.__init__).parameters.items() if k != "self"}
    assert PerfConfig.from_dict({k: v for k, v in defaults.items() if k != "schedule"}) == PerfConfig()
