"""`deltalens train --log tensorboard`: a run's curves as TensorBoard event files, in OUT/tensorboard/.

Written through torch's SummaryWriter (the `tensorboard` package), one scalar a tag:

    train/loss, train/reveal_accuracy, train/lr     every optimiser step
    val/reveal_accuracy_<k>x                        at each evaluation: held-out traces at 1x, 2x and 4x
                                                    the training length (the 2x and 4x ones only when
                                                    logging: they cost two more evaluations)

View them with `tensorboard --logdir OUT/tensorboard`. A resumed run drops events past the step it
resumes from (purge_step), so an interrupted run's curves read as one unbroken run's.
"""

from __future__ import annotations

from pathlib import Path

from deltalens.core.errors import DeltalensError

LOGGERS = ("tensorboard",)
FOLDER = "tensorboard"
LENGTHS = (1, 2, 4)  # multiples of the training length evaluated at each evaluation


class TensorBoardLog:
    """Scalars of one run into `run_dir`/tensorboard (see the module docstring)."""

    def __init__(self, run_dir: Path, resume_step: int | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise DeltalensError("--log tensorboard needs the tensorboard package: pip install tensorboard") from None
        self.folder = Path(run_dir) / FOLDER
        self.writer = SummaryWriter(str(self.folder), purge_step=resume_step)

    def step(self, step: int, loss: float, accuracy: float, lr: float) -> None:
        self.writer.add_scalar("train/loss", loss, step)
        self.writer.add_scalar("train/reveal_accuracy", accuracy, step)
        self.writer.add_scalar("train/lr", lr, step)

    def evaluation(self, step: int, by_length: dict[int, float]) -> None:
        """by_length: multiple of the training length -> held-out reveal accuracy."""
        for multiple, accuracy in by_length.items():
            self.writer.add_scalar(f"val/reveal_accuracy_{multiple}x", accuracy, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def make_log(kind: str | None, run_dir: Path, resume_step: int | None = None) -> TensorBoardLog | None:
    if kind is None:
        return None
    if kind not in LOGGERS:
        raise DeltalensError(f"--log must be one of: {', '.join(LOGGERS)}; got {kind!r}.")
    return TensorBoardLog(run_dir, resume_step)
