"""Training and fine-tuning EDVR: checked run options (:mod:`.options`), on-the-fly training pairs
(:mod:`.data`), losses (:mod:`.loss`), the loop (:mod:`.trainer`) and its exactly resumable checkpoints
(:mod:`.checkpoint`), validation PSNR on held-out sequences (:mod:`.validate`), and shipping a checkpoint as
bundled weights (:mod:`.ship`).  Entry point: :func:`train`."""

from vsr.train.options import TrainOptions
from vsr.train.trainer import Trainer, lr_at, train

__all__ = ["TrainOptions", "Trainer", "lr_at", "train"]
