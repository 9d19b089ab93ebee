"""Answers built on the frames: a run's history across runs (:mod:`iobench.answers.history`)."""
