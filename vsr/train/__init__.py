"""Training and fine-tuning EDVR: on-the-fly training pairs (:mod:`.data`), the loop and its exactly
resumable checkpoints (:mod:`.trainer`), validation PSNR on held-out sequences (:mod:`.validate`),
and shipping a checkpoint as bundled weights (:mod:`.ship`).  Entry point: :func:`train`."""

from vsr.train.trainer import TrainOptions, Trainer, lr_at, train

__all__ = ["TrainOptions", "Trainer", "lr_at", "train"]
