"""Batch inference on Spark, Ray and Dask: throughput of onyx.batch on 2 local workers against
one process, and onnxruntime in the same glue (``session_factory``), side by side.

    python benchmarks/bench_batch.py                      # 1M rows of a tree model, 10k images
    python benchmarks/bench_batch.py --rows 200000 --images 2000 --engines dask,ray
    python benchmarks/bench_batch.py --out docs/benchmarks_distributed.md

Needs the engines (pip install -e ".[test]" has them; Spark also needs Java). Each engine is
started once and warmed up on a small job (workers make their sessions then), so the figures
are steady-state throughput; the scaling ratio is the engine's rows/s over one process's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
# the engines' worker processes import the session factories by name (batch_runtimes.py)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT / "benchmarks"), *filter(None, [os.environ.get("PYTHONPATH")])]
)

import batch_models as bm  # noqa: E402
from batch_runtimes import RUNTIMES  # noqa: E402

from onyx.batch import Predictor  # noqa: E402


def workloads(rows: int, images: int):
    import pandas as pd

    x = bm.features(rows, seed=1)
    tree = pd.DataFrame(x, columns=[f"f{i}" for i in range(6)])
    pics = np.random.default_rng(2).normal(size=(images, 784)).astype(np.float32)
    cnn = pd.DataFrame({"row": np.arange(images), "image": list(pics)})
    return [
        (
            "lightgbm",
            str(bm.LIGHTGBM),
            tree,
            {"input_columns": list(tree.columns), "batch_size": 8192, "output_columns": ["label"]},
        ),
        ("cnn", str(bm.CNN), cnn, {"input_columns": {"image": "image"}, "batch_size": 64}),
    ]


def _time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_process(model, frame, options, factory):
    predictor = Predictor(model, session_factory=factory, **options)
    return lambda: predictor(frame)


class Engines:
    def __init__(self, names):
        self.names = names
        self.started = {}

    def runner(self, name, model, frame, options, factory):
        return getattr(self, f"_{name}")(model, frame, options, factory)

    def _dask(self, model, frame, options, factory):
        import dask
        import dask.dataframe as dd
        from distributed import Client, LocalCluster

        from onyx.batch import dask as adapter

        if "dask" not in self.started:
            dask.config.set({"dataframe.convert-string": False})
            cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
            self.started["dask"] = (cluster, Client(cluster))
        ddf = dd.from_pandas(frame, npartitions=8).persist()
        return lambda: adapter.predict(ddf, model, session_factory=factory, **options).compute()

    def _ray(self, model, frame, options, factory):
        import ray

        from onyx.batch import ray as adapter

        if "ray" not in self.started:
            ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
            self.started["ray"] = True
        ds = ray.data.from_pandas(frame).repartition(8).materialize()
        return lambda: adapter.predict(
            ds, model, concurrency=2, session_factory=factory, **options
        ).materialize()

    def _spark(self, model, frame, options, factory):
        from pyspark.sql import SparkSession

        from onyx.batch import spark as adapter

        if "spark" not in self.started:
            os.environ["PYSPARK_PYTHON"] = sys.executable
            self.started["spark"] = (
                SparkSession.builder.master("local[2]")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                .getOrCreate()
            )
        session = self.started["spark"]
        sdf = session.createDataFrame(frame).repartition(8).cache()
        sdf.count()
        out = lambda: adapter.predict(sdf, model, session_factory=factory, **options)  # noqa: E731
        return lambda: out().write.format("noop").mode("overwrite").save()

    def stop(self):
        if "dask" in self.started:
            cluster, client = self.started["dask"]
            client.close()
            cluster.close()
        if "ray" in self.started:
            import ray

            ray.shutdown()
        if "spark" in self.started:
            self.started["spark"].stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--engines", default="dask,ray,spark")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", help="write the table (markdown) here too")
    args = parser.parse_args(argv)
    engines = Engines(args.engines.split(","))
    rows = []
    try:
        for name, model, frame, options in workloads(args.rows, args.images):
            n = len(frame)
            for runtime, factory in RUNTIMES.items():
                one = run_process(model, frame, options, factory)
                one()  # warm-up: the session
                base = n / _time(one, args.repeat)
                rows.append((name, n, "one process", runtime, base, 1.0))
                print(rows[-1], flush=True)
                for engine in engines.names:
                    job = engines.runner(engine, model, frame, options, factory)
                    job()  # warm-up: workers make their sessions
                    rate = n / _time(job, args.repeat)
                    rows.append((name, n, f"{engine}, 2 workers", runtime, rate, rate / base))
                    print(rows[-1], flush=True)
    finally:
        engines.stop()
    table = _table(rows, args)
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    return 0


def _table(rows, args) -> str:
    lines = [
        "# Batch inference on Spark, Ray and Dask",
        "",
        f"Made by `python benchmarks/bench_batch.py --rows {args.rows} --images {args.images}` on "
        f"{time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, median of {args.repeat} runs after a "
        "warm-up, each runtime with one thread per worker. Rows/s is the whole job (scoring and "
        "the engine's own work); scaling is rows/s over one process's with the same runtime.",
        "",
        "| workload | rows | where | runtime | rows/s | scaling |",
        "|---|---|---|---|---|---|",
    ]
    for name, n, where, runtime, rate, scale in rows:
        lines.append(f"| {name} | {n} | {where} | {runtime} | {rate:,.0f} | {scale:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
