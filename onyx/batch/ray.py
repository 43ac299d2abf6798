"""Ray Data: score a Dataset with ``map_batches`` on a pool of actors, each holding one session.

from onyx.batch import ray
scored = ray.predict(dataset, "model.onnx", concurrency=2, rows_per_batch=4096)
"""

from __future__ import annotations

from typing import Any

from ._engine import as_predictor, require
from .core import Predictor


class _Scorer:
    """One actor: its Predictor makes the session once, when the actor starts."""

    def __init__(self, predictor: Predictor):
        self.predictor = predictor
        self.predictor.session  # noqa: B018  (made now, not on the first batch)

    def __call__(self, batch: Any) -> Any:
        return self.predictor(batch)


def predict(
    ds: Any,
    model: Any,
    *,
    concurrency: int = 2,
    rows_per_batch: int | None = 4096,
    batch_format: str = "pandas",
    num_cpus: float | None = None,
    preserve_order: bool = True,
    **options: Any,
) -> Any:
    """``ds`` with the model's output columns added (a lazy Ray Dataset).

    ``concurrency`` actors score it (one session each); ``rows_per_batch`` rows reach an actor at
    a time (the Predictor's ``batch_size`` splits them further into runs); ``preserve_order``
    sets Ray Data's switch that keeps rows in the dataset's order; ``batch_format`` is "pandas"
    or "pyarrow"; ``options`` are the Predictor's."""
    ray = require("ray")
    predictor = as_predictor(model, options)
    extra = {} if num_cpus is None else {"num_cpus": num_cpus}
    scored = ds.map_batches(
        _Scorer,
        # Ray puts a large argument (the model's bytes) in its object store once by itself
        fn_constructor_args=(predictor,),
        batch_size=rows_per_batch,
        batch_format=batch_format,
        compute=ray.data.ActorPoolStrategy(size=concurrency),
        zero_copy_batch=True,
        **extra,
    )
    if preserve_order:
        # Ray Data hands blocks on as they finish; scored rows come back in the dataset's
        # order, as they do from Spark and Dask. A dataset runs with the context it carries
        # (a copy made when it was created), so the switch is set on this one.
        scored.context.execution_options.preserve_order = True
    return scored
