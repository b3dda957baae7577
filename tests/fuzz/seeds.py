"""Small valid inputs of every family, the fuzz tests' starting points.

Each seed is a folder and the paths inside it that ``analyze`` would be given. Real samples
from tests/data are cut down to a few hundred events (every metadata event kept) so that one
case imports in a fraction of a second; the synthetic runs come from the test generators.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import ascend_gen, cluster_gen
from tests import kineto_gen as gen
from tests.paths import data_file

SMALL_KINETO = [
    "old_pt18_inference_rank1.json.gz",
    "a100_triton.json.gz",
    "cpu_only_rank34.json.gz",
    "mi250_rocm_minitoy.json.gz",
    "a100_alexnet.json.gz",
]
TEXT_EXTRAS = [
    "communication.json",
    "communication_matrix.json",
    "step_trace_time.csv",
    "op_statistic.csv",
    "api_statistic.csv",
]
CSV_ROWS = 30  # rows kept of a real CSV
EVENTS_PER_TRACK = 40  # events kept per (phase, process) of a real timeline


@dataclass(frozen=True)
class Seed:
    """A valid input: its folder and what ``analyze`` is given, relative to the folder."""

    name: str
    folder: Path
    inputs: tuple[str, ...]

    def paths(self, root: Path) -> list[Path]:
        return [root / name for name in self.inputs]


def _cut_csv(source: Path, target: Path, rows: int = CSV_ROWS) -> None:
    with source.open(newline="", encoding="utf-8-sig") as stream:
        records = list(csv.reader(stream))[: rows + 1]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(records)
    target.write_text(out.getvalue(), encoding="utf-8")


def _cut_timeline(source: Path, target: Path) -> None:
    events = json.loads(source.read_bytes())
    kept: list[dict[str, Any]] = []
    per_track: dict[tuple[Any, Any], int] = defaultdict(int)
    for event in events:
        track = (event.get("ph"), event.get("pid"))
        if event.get("ph") == "M" or per_track[track] < EVENTS_PER_TRACK:
            per_track[track] += 1
            kept.append(event)
    target.write_text(json.dumps(kept), encoding="utf-8")


def _real_text_rank(source: Path, target: Path) -> None:
    """A real torch_npu text rank folder, every file cut down."""
    output = target / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file():
            shutil.copy(path, target / path.name)
    for path in (source / "ASCEND_PROFILER_OUTPUT").iterdir():
        if path.name == "trace_view.json":
            _cut_timeline(path, output / path.name)
        elif path.suffix == ".csv":
            _cut_csv(path, output / path.name)
        else:
            shutil.copy(path, output / path.name)


def _add_text_extras(rank: Path) -> None:
    """The small summary files of a real rank beside a synthetic run's timeline."""
    real = data_file("ascend/torch_npu_text/level1/rank0_ascend_pt")
    for name in TEXT_EXTRAS:
        shutil.copy(real / "ASCEND_PROFILER_OUTPUT" / name, rank / "ASCEND_PROFILER_OUTPUT" / name)
    _cut_csv(
        real / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv",
        rank / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv",
    )
    shutil.copy(real / "profiler_metadata.json", rank / "profiler_metadata.json")


def kineto_seeds(base: Path) -> list[Seed]:
    seeds = []
    for name in SMALL_KINETO:
        folder = base / f"kineto-{name.split('.')[0]}"
        folder.mkdir(parents=True)
        packed = data_file(f"kineto/{name}").read_bytes()
        if len(seeds) % 2:  # some as plain JSON: damage to the text itself
            (folder / name.removesuffix(".gz")).write_bytes(gzip.decompress(packed))
            seeds.append(Seed(name, folder, (name.removesuffix(".gz"),)))
        else:
            (folder / name).write_bytes(packed)
            seeds.append(Seed(name, folder, (name,)))
    folder = base / "kineto-synthetic"
    folder.mkdir()
    synthetic = [
        gen.cpu_op("ProfilerStep#1", 0, 100, external_id=9),
        gen.cpu_op('quote \\" and }, {', 10, 5, external_id=1),
        gen.runtime("cudaLaunchKernel", 12, 2, correlation=3),
        gen.device_task("kernel", "k", 20, 4, correlation=3),
        gen.flow("s", "ac2g", 3, 12, pid=100, tid=100),
        gen.cpu_op("x", gen.Num("1712195495505543.2"), gen.Num("1.5"), external_id=2),
    ]
    (folder / "trace.json").write_text(
        gen.document_text(synthetic, schemaVersion=1, _after={"traceName": "t"})
    )
    seeds.append(Seed("synthetic", folder, ("trace.json",)))
    return seeds


def torch_npu_text_seeds(base: Path) -> list[Seed]:
    synthetic = base / "text-synthetic"
    rank = ascend_gen.write_text(synthetic, ascend_gen.make_run(steps=2))
    _add_text_extras(rank)
    real = base / "text-real"
    _real_text_rank(
        data_file("ascend/torch_npu_text/level1/rank0_ascend_pt"), real / "rank0_ascend_pt"
    )
    return [
        Seed("synthetic", synthetic, (rank.name,)),
        Seed("real level1", real, ("rank0_ascend_pt",)),
    ]


def torch_npu_db_seeds(base: Path) -> list[Seed]:
    synthetic = base / "db-synthetic"
    rank = ascend_gen.write_db(synthetic, ascend_gen.make_run(steps=2))
    real_rank = data_file("ascend/torch_npu_db/level0/rank0_ascend_pt")
    shutil.copy(
        real_rank / "ASCEND_PROFILER_OUTPUT" / "analysis.db",
        rank / "ASCEND_PROFILER_OUTPUT" / "analysis.db",
    )
    real = base / "db-real"
    shutil.copytree(real_rank, real / real_rank.name)
    return [
        Seed("synthetic", synthetic, (rank.name,)),
        Seed("real level0", real, (real_rank.name,)),
    ]


def msprof_csv_seeds(base: Path) -> list[Seed]:
    real = base / "msprof-real" / "PROF_000001_20250101000000_ABCDEFGH"
    output = real / "mindstudio_profiler_output"
    output.mkdir(parents=True)
    shutil.copy(data_file("ascend/msprof_cli/op_summary_1.csv"), output / "op_summary_1.csv")
    sliced = base / "msprof-slices" / "PROF_000002_20250101000000_ABCDEFGH"
    output = sliced / "mindstudio_profiler_output"
    output.mkdir(parents=True)
    for index, rows in enumerate(
        (ascend_gen.MSPROF_SLICE_ROWS[:2], ascend_gen.MSPROF_SLICE_ROWS[2:])
    ):
        lines = [",".join(ascend_gen.MSPROF_SLICE_HEADER)] + [",".join(cells) for cells in rows]
        (output / f"op_summary_slice_{index}_20250101000000.csv").write_text("\n".join(lines))
    # a timeline beside the kernel table, as msprof writes it
    text = ascend_gen.write_text(base / "msprof-timeline-source")
    shutil.copy(
        text / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", output / "msprof_20250101000000.json"
    )
    return [
        Seed("real op_summary", real.parent, (real.name,)),
        Seed("slices and timeline", sliced.parent, (sliced.name,)),
    ]


def msprof_db_seeds(base: Path) -> list[Seed]:
    real = base / "msprof-db" / "PROF_000001_20250101000000_ABCDEFGH"
    real.mkdir(parents=True)
    shutil.copy(data_file("ascend/msprof_cli/msprof_0.db"), real / "msprof_0.db")
    return [Seed("real msprof db", real.parent, (real.name,))]


def cluster_seeds(base: Path) -> list[Seed]:
    kineto = base / "cluster-kineto"
    cluster_gen.write_ranks(kineto / "ranks", 3, slow_rank=1, steps=2)
    ascend = base / "cluster-ascend" / "run"
    for rank in (0, 1):
        written = ascend_gen.write_text(base / f"cluster-ascend-{rank}")
        target = ascend / f"node_{rank}_ascend_pt"
        shutil.move(written, target)
        info = target / "profiler_info_0.json"
        document = json.loads(info.read_text())
        document["rank_id"] = rank
        info.unlink()
        (target / f"profiler_info_{rank}.json").write_text(json.dumps(document))
    return [
        Seed("kineto ranks", kineto, ("ranks",)),
        Seed("ascend ranks", ascend.parent, ("run",)),
    ]


FAMILIES = {
    "kineto": kineto_seeds,
    "torch_npu_text": torch_npu_text_seeds,
    "torch_npu_db": torch_npu_db_seeds,
    "msprof_csv": msprof_csv_seeds,
    "msprof_db": msprof_db_seeds,
    "cluster": cluster_seeds,
}
