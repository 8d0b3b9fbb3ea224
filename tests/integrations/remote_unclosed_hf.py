"""A ``transformers.Trainer`` run whose callback is never closed by its ``train()`` wrapper, writing to ``s3://``.

``python -m tests.integrations.remote_unclosed_hf URL ENDPOINT``: run by ``test_remote_output.py``, which serves moto.
The script calls ``Trainer.train(trainer)`` (the class's method, not the instance's wrapped one, as a subclass or a
launcher that calls it that way does) and a callback raises at step 5, inside the window (steps 3-6): the process
ends with that exception and the window open; the partial window and the run folder are flushed and uploaded as the
interpreter shuts down, while the upload threads still take work.
"""

from __future__ import annotations

import sys
from pathlib import Path

from transformers import Trainer

from perf_callbacks import TransformersPerfCallback
from tests.integrations.hf_helpers import QUIET, FailAt, make_trainer


def main(url: str, endpoint: str, out: str) -> None:
    callback = TransformersPerfCallback(output_dir=url, storage_options={"client_kwargs": {"endpoint_url": endpoint}},
                                        schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 4}, **QUIET)
    trainer = make_trainer(Path(out), [callback, FailAt(5)], max_steps=8)
    Trainer.train(trainer)  # bypasses the instance's wrapper: nothing closes the callback before exit


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
