"""``/v1/jobs``: submit (any family's job spec: ``service.families``), list, follow, cancel, and the manifest."""

from __future__ import annotations

from unirender.service import families
from unirender.service.errors import ApiError
from unirender.service.jobs import page_arguments
from unirender.service.paths import resolve_output_dir


def list_jobs(app, request, owner):
    """The owner's jobs, newest first, a page at a time (``?limit=&before=``; ``next``: the next page's
    ``before``)."""
    jobs, next_page = app.jobs.page(owner, *page_arguments(request.args))
    return app.json_response({"jobs": [j.describe() for j in jobs], "next": next_page})


def submit_job(app, request, owner):
    data = app.read_body(request)
    spec = families.family_of_body(data).job_spec(app, data)
    out = resolve_output_dir(app.config.data_root, owner, spec.output.directory)
    workers = spec.workers if isinstance(spec.workers, int) else 1
    if workers > app.slots.total:
        raise ApiError(422, "too_many_workers", f"workers={workers} exceeds the {app.slots.total} player "
                       "slots of this service", path="workers")
    job = app.jobs.submit(owner, spec, out, workers)
    resp = app.json_response(job.describe(), status=202)
    resp.headers["Location"] = f"/v1/jobs/{job.id}"
    return resp


def get_job(app, request, owner, job_id):
    return app.json_response(app.jobs.get(owner, job_id).describe())


def cancel_job(app, request, owner, job_id):
    return app.json_response(app.jobs.cancel(owner, job_id).describe(), status=202)


def job_manifest(app, request, owner, job_id):
    return app.json_response(app.jobs.manifest(owner, job_id))
