"""``POST /v1/render``: one episode on a temporary player, every frame in the response, for any family (its
``render``: ``service.families``, ``service.one_shot``)."""

from __future__ import annotations

from unirender.service import families


def render(app, request, owner):
    fmt = app.response_format(request)
    data = app.read_body(request)
    docs = families.family_of_body(data).render(app, owner, data, fmt, app.json_as_sent(request))
    return app.encoded_response({"events": list(docs)}, fmt)
