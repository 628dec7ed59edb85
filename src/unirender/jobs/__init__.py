"""Declarative rendering jobs: run a :class:`unirender.spec.JobSpec` into a dataset, and read it back.

``render(spec_or_path, ...) -> JobResult`` and ``load_dataset(dir) -> Dataset`` (iterates Events).
"""

from unirender.jobs.dataset import Dataset, load_dataset
from unirender.jobs.runner import JobResult, JobRunner, render
from unirender.jobs.state import JobError

__all__ = ["Dataset", "JobError", "JobResult", "JobRunner", "load_dataset", "render"]
