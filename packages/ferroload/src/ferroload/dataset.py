"""ferroload-rs 0.1.1's module `ferroload.dataset`, deprecated: its names are
`ferroload.Dataset`, `ferroload.Modality`, `ferroload.Annotation`, ... (docs/migrating.md)."""

from ferroload.compat import deprecated
from ferroload.compat._dataset import Dataset
from ferroload.compat._executor import MapPlan, detect_topology, select_executor
from ferroload.compat._map import Annotation, Modality

deprecated(
    "the module ferroload.dataset",
    "the same names on ferroload (ferroload.Dataset, ...)",
    stacklevel=2,
)

__all__ = [
    "Annotation",
    "Dataset",
    "FerroTorchDataset",  # noqa: F822  (lazy, below)
    "MapPlan",
    "Modality",
    "detect_topology",
    "select_executor",
]


def __getattr__(name: str) -> object:
    if name == "FerroTorchDataset":
        from ferroload.compat._loader import FerroTorchDataset

        return FerroTorchDataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
