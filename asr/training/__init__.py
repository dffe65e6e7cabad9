"""Training: the loop (:mod:`asr.training.train`: DDP, mixed precision, accumulation, exact resume),
the task it trains (:mod:`asr.training.task`), the optimiser and schedule, the process runtime
(distributed set-up, metrics log, stop flag), validation and the training-curve plot."""
