"""The service's endpoints, one module per part of the API; each endpoint is ``f(app, request, owner, **url
arguments) -> response`` (``app`` a :class:`unirender.service.app.ServiceApp`, ``owner`` the authenticated client,
None on public routes). They parse the request, call the app's registries (``app.sessions``, ``app.jobs``), the
family registry (``service.families``) and the documents (``service.documents``), and answer; routing,
authentication and draining are the app's.

- :mod:`.meta`: ``/``, ``/healthz``, ``/readyz``, ``/metrics``, ``/openapi.json``, ``/docs``, ``/v1/platforms``;
- :mod:`.sessions`: ``/v1/sessions`` and a session's step and reset;
- :mod:`.batch`: ``/v1/steps`` (several sessions stepped in one request) and ``/v1/sessions/{id}/event``;
- :mod:`.render`: ``/v1/render``;
- :mod:`.jobs`: ``/v1/jobs``.
"""
