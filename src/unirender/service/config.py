"""Service configuration: one pydantic model, loaded from a YAML/JSON/TOML file and the environment.

Client tokens come from the file (``tokens:``) or from ``UNIRENDER_TOKENS`` (comma separated, optionally
``name=token``). A token in the file may carry scopes (``alice: {token: s3cret, scopes: [sessions, builds:write]}``);
a bare one has :data:`unirender.service.scopes.DEFAULT_SCOPES` (``service.scopes`` says what each scope allows). With no token configured the service is open, so it refuses a non-loopback ``host`` unless
``allow_open`` says the network itself is private (a container's port published on the host's loopback only).
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from unirender.errors import SpecError
from unirender.service.scopes import DEFAULT_SCOPES, SCOPES, Grant, check_scopes

TOKENS_ENV = "UNIRENDER_TOKENS"
CONFIG_ENV = "UNIRENDER_CONFIG"
ANONYMOUS = "anonymous"
OPEN_GRANT = Grant(ANONYMOUS, frozenset(SCOPES))  # an open service (no tokens) refuses nobody anything


class Limits(BaseModel):
    """Per-token and global limits; every one is enforced with a 4xx JSON error, never by hanging."""

    model_config = ConfigDict(extra="forbid")

    sessions_per_token: int = Field(4, ge=1)
    total_players: int = Field(8, ge=1, description="player processes (sessions + running jobs) at once")
    body_bytes: int = Field(4 * 2**20, ge=1024, description="largest client request body")
    pixels: int = Field(2048 * 2048, ge=1, description="largest width x height of a session or job")
    steps_per_second: float = Field(1000.0, gt=0, description="per session; bursts of one second allowed")
    jobs_per_token: int = Field(2, ge=1, description="queued or running jobs per token")
    cameras: int = Field(8, ge=0, description="third-party cameras per session (each renders a full frame)")
    agents: int = Field(256, ge=1, description="ML-Agents decision agents per behavior one step may act for")
    # Build uploads (PUT /v1/builds/{digest}, docs/builds.md "A service's store"): bytes, checked from the head.
    build_bytes: int = Field(8 * 2**30, ge=1024, description="largest build upload (the archive's bytes)")
    build_bytes_per_token: int = Field(32 * 2**30, ge=1024, description="all the builds one token uploaded")
    build_store_bytes: int = Field(128 * 2**30, ge=1024, description="the whole build store, uploads included")


def default_data_root() -> Path:
    """``$XDG_DATA_HOME/unirender`` (``~/.local/share/unirender``): never the directory ``serve`` was started in."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "unirender"


class ServiceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8200, ge=0, le=65535)
    tokens: dict[str, str] = Field(default_factory=dict, description="name -> bearer token")
    token_scopes: dict[str, list[str]] = Field(
        default_factory=dict, description=f"name -> scopes ({', '.join(SCOPES)}); a token not named here has "
        f"{', '.join(sorted(DEFAULT_SCOPES))}. Also written in tokens: as name: {{token: ..., scopes: [...]}}")
    data_root: Path = Field(default_factory=lambda: default_data_root(),
                            description="job outputs and session logs go here only")
    backend: Literal["local", "ray"] = Field("local", description="session backend: local | ray")
    backend_options: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword options of the backend: local (max_sessions, gpus, sessions_per_gpu, ...), "
        "ray (address, max_restarts, wait_timeout, ...); see docs/cluster.md",
    )
    allowed_executables: list[str] = Field(
        default_factory=lambda: ["builtin"], description="executables a client may ask for"
    )
    allowed_builds: list[str] = Field(
        default_factory=list, description="builds of the build store a client may ask for (environment.build), "
        "by name ('kitchen:v1', or 'kitchen' for every tag) or digest ('sha256:...'); docs/builds.md",
    )
    allow_uploaded_builds: bool = Field(True, description="a build uploaded here (by a token with builds:write) "
                                        "may be launched like one in allowed_builds")
    build_store: Path | None = Field(None, description="the build store's folder (default: $UNIRENDER_BUILDS, "
                                     "else $XDG_CACHE_HOME/unirender/builds); read-only is enough")
    build_store_max_bytes: int | None = Field(None, ge=1, description="the build store's bound: a publish past "
                                              "it evicts least recently used builds no running player leases "
                                              "(default: $UNIRENDER_BUILDS_MAX_BYTES, else unbounded); "
                                              "docs/builds.md, 'A bounded store'")
    idle_timeout_s: float = Field(600.0, gt=0, description="sessions idle this long are stopped")
    reap_interval_s: float = Field(5.0, gt=0)
    # Durable records (docs/service.md, "Restarts"): finished jobs and lost sessions stay listed this long.
    job_retention_days: float = Field(30.0, gt=0, description="finished jobs stay listed this many days")
    lost_session_retention_s: float = Field(24 * 3600.0, gt=0, description="sessions lost in a restart "
                                            "stay listed (as lost, with the reason) this long")
    player_body_bytes: int = Field(512 * 2**20, description="largest POST /train body from a player")
    threads: int | None = Field(None, ge=2, description="WSGI threads; default 2 x total_players + 8")
    # Connection policy (docs/service.md, "Hardening"): idle connections that proved no token go quickly, so
    # idle attackers cannot hold the connection slots; a long poll or a long render never counts as idle.
    untrusted_idle_s: float = Field(10.0, gt=0, description="idle connection with no verified token is closed")
    client_idle_s: float = Field(120.0, gt=0, description="idle keep-alive of a client with a valid token")
    player_idle_s: float = Field(24 * 3600.0, gt=0, description="idle connection of a verified player")
    connection_limit: int = Field(1000, ge=16, description="open connections at once (one file descriptor each)")
    connections_per_address: int = Field(0, ge=0, description="per remote address; 0: no cap (players and "
                                         "a reverse proxy all connect from one address)")
    allow_open: bool = Field(False, description="serve without tokens on a non-loopback host: only where the "
                             "network itself is private (e.g. a container's port published on 127.0.0.1)")
    limits: Limits = Field(default_factory=Limits)

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens_as_mapping(cls, value):
        if isinstance(value, list | tuple):  # a bare list of tokens: name them by position
            return {f"token{i}": str(t) for i, t in enumerate(value)}
        return value

    @model_validator(mode="before")
    @classmethod
    def _scoped_tokens(cls, data):
        """``tokens: {alice: {token: s3cret, scopes: [...]}}`` -> ``tokens`` + ``token_scopes``."""
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), dict):
            return data
        tokens, scopes = {}, dict(data.get("token_scopes") or {})
        for name, value in data["tokens"].items():
            if isinstance(value, dict):
                extra = set(value) - {"token", "scopes"}
                if extra or "token" not in value:
                    raise ValueError(f"tokens.{name}: a scoped token is {{token: ..., scopes: [...]}}, "
                                     f"got keys {sorted(value)}")
                tokens[name] = value["token"]
                if "scopes" in value:
                    scopes[name] = value["scopes"]
            else:
                tokens[name] = value
        return {**data, "tokens": tokens, "token_scopes": scopes}

    @field_validator("token_scopes", mode="before")
    @classmethod
    def _known_scopes(cls, value):
        if not isinstance(value, dict):
            return value
        return {name: sorted(check_scopes(scopes)) for name, scopes in value.items()}

    @model_validator(mode="after")
    def _scopes_name_tokens(self):
        unknown = sorted(set(self.token_scopes) - set(self.tokens))
        if unknown:
            raise ValueError(f"token_scopes names no configured token: {', '.join(unknown)}")
        return self

    def grants(self) -> dict[str, Grant]:
        """bearer token -> :class:`Grant` (its name and scopes)."""
        return {token: Grant(name, frozenset(self.token_scopes.get(name, DEFAULT_SCOPES)))
                for name, token in self.tokens.items()}  # fmt: skip

    @property
    def auth_enabled(self) -> bool:
        return bool(self.tokens)

    @property
    def wsgi_threads(self) -> int:
        # Each WSGI player holds one thread in a long poll; each client step holds one: 2 x players + spare
        # (threads >= 2 x long polls + 4, or a long poll can take the last thread: docs/service.md).
        return self.threads or 2 * self.limits.total_players + 8

    @property
    def connection_policy(self):
        from unirender.transport.serving import ConnectionPolicy

        return ConnectionPolicy(untrusted_idle_s=self.untrusted_idle_s, client_idle_s=self.client_idle_s,
                                player_idle_s=self.player_idle_s, per_address=self.connections_per_address)

    def is_loopback(self) -> bool:
        from unirender.netaddr import is_loopback

        return is_loopback(self.host)


def parse_tokens(text: str) -> dict[str, str]:
    """``"alice=s3cret,bob=t0ken"`` or ``"s3cret,t0ken"`` -> {name: token}."""
    tokens: dict[str, str] = {}
    for i, item in enumerate(t.strip() for t in text.split(",")):
        if not item:
            continue
        name, sep, token = item.partition("=")
        if sep:
            tokens[name.strip()] = token.strip()
        else:
            tokens[f"env{i}"] = item
    return tokens


def _read_mapping(path: Path) -> dict:
    text = path.read_text()
    if path.suffix == ".toml":
        data = tomllib.loads(text)
    elif path.suffix == ".json":
        data = json.loads(text)
    else:
        data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise SpecError(f"service config {path} must be a mapping")
    return data.get("service", data) if isinstance(data.get("service"), dict) else data


def load_config(path: str | os.PathLike | None = None, **overrides) -> ServiceConfig:
    """File (``path`` or ``$UNIRENDER_CONFIG``), then ``$UNIRENDER_TOKENS``, then keyword overrides."""
    data: dict = {}
    path = path or os.environ.get(CONFIG_ENV)
    if path:
        try:
            data = _read_mapping(Path(path))
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise SpecError(f"cannot read service config {path}: {exc}") from exc
    env_tokens = os.environ.get(TOKENS_ENV)
    if env_tokens:
        tokens = dict(ServiceConfig._tokens_as_mapping(data.get("tokens") or {}))
        tokens.update(parse_tokens(env_tokens))
        data["tokens"] = tokens
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return ServiceConfig.model_validate(data)
    except ValidationError as exc:
        errors = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
        raise SpecError("invalid service config: " + "; ".join(f"{k}: {m}" for k, m in errors), errors) from exc
