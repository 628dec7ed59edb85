"""mlagents-envs' registry API (``mlagents_envs.registry``), backed by the build store and a registry file of the
user's own, since Unity's registry host is not ours (docs/builds.md)::

    from unirender.mlagents.registry import default_registry
    env = default_registry["3DBall"].make(no_graphics=True)   # a UnityEnvironment

``default_registry`` holds every ML-Agents build in the store that has a name (``reach:v1`` is ``"reach"`` and
``"reach:v1"``), and every entry of the registry file (``$UNIRENDER_REGISTRY``, else
``$XDG_CONFIG_HOME/unirender/registry.yaml``), in mlagents-envs' manifest format plus a ``sha256``::

    environments:
      - 3DBall:
          expected_reward: 100
          description: balance the ball
          linux_url: https://example.org/3DBall.zip
          sha256: <the archive's sha256, or the build's sha256:digest>

A remote entry's ``make()`` pulls its archive into the store once (checked against its sha256 before anything is
published) and launches it from there.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from unirender.builds import BuildStore, resolve_build


class BaseRegistryEntry:
    def __init__(self, identifier: str, expected_reward: float | None, description: str | None) -> None:
        self._identifier, self._expected_reward, self._description = identifier, expected_reward, description

    @property
    def identifier(self) -> str:
        return self._identifier

    @property
    def expected_reward(self) -> float | None:
        return self._expected_reward

    @property
    def description(self) -> str | None:
        return self._description

    def make(self, **kwargs: Any):
        raise NotImplementedError

    def _launch(self, executable: str, kwargs: dict[str, Any]):
        from unirender.mlagents.environment import UnityEnvironment

        kwargs.pop("file_name", None)  # as mlagents-envs: the entry names the build
        return UnityEnvironment(file_name=executable, **kwargs)


class StoreRegistryEntry(BaseRegistryEntry):
    """A build in the store, by reference (``name:tag`` or ``sha256:<digest>``)."""

    def __init__(self, identifier: str, reference: str, expected_reward: float | None = None,
                 description: str | None = None, store: BuildStore | None = None) -> None:  # fmt: skip
        super().__init__(identifier, expected_reward, description)
        self.reference, self._store = reference, store

    def make(self, **kwargs: Any):
        return self._launch(resolve_build(self.reference, store=self._store).executable, kwargs)


class RemoteRegistryEntry(BaseRegistryEntry):
    """mlagents-envs' entry of a build downloaded from a URL per platform; here ``sha256`` (the archive's, or the
    build's digest) is checked before the build is published to the store, and a second ``make()`` downloads
    nothing."""

    def __init__(self, identifier: str, expected_reward: float | None, description: str | None,
                 linux_url: str | None, darwin_url: str | None = None, win_url: str | None = None,
                 additional_args: list[str] | None = None, sha256: str | None = None,
                 store: BuildStore | None = None) -> None:  # fmt: skip
        super().__init__(identifier, expected_reward, description)
        self._urls = {"linux": linux_url, "darwin": darwin_url, "win32": win_url}
        self._additional_args = list(additional_args or [])
        self.sha256, self._store = sha256, store

    @property
    def store_reference(self) -> str:
        name = "registry-" + re.sub(r"[^a-z0-9._-]", "-", self.identifier.lower())
        tag = (self.sha256 or "latest").removeprefix("sha256:")[:32]
        return f"{name}:{tag}"

    def make(self, **kwargs: Any):
        url = self._urls.get("linux" if sys.platform.startswith("linux") else sys.platform)
        if url is None:
            raise FileNotFoundError(
                f"The entry {self.identifier} does not contain a valid url for this platform"
            )
        store = self._store or BuildStore()
        try:
            executable = resolve_build(self.store_reference, store=store).executable
        except LookupError:
            build = store.pull(url, sha256=self.sha256, name=self.store_reference)
            executable = str(build.executable)
        if self._additional_args:
            kwargs["additional_args"] = [*self._additional_args, *(kwargs.get("additional_args") or [])]
        return self._launch(executable, kwargs)


class UnityEnvRegistry(Mapping):
    """mlagents-envs' ``UnityEnvRegistry``: identifier -> entry; ``registry[identifier].make(**kwargs)``."""

    def __init__(self) -> None:
        self._entries: dict[str, BaseRegistryEntry] = {}

    def register(self, new_entry: BaseRegistryEntry) -> None:
        self._entries[new_entry.identifier] = new_entry

    def register_from_yaml(self, path: str | os.PathLike, store: BuildStore | None = None) -> None:
        """Entries from a registry file (mlagents-envs' manifest format, with ``sha256``)."""
        import yaml

        document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        for item in document.get("environments") or []:
            for identifier, fields in item.items():
                fields = fields or {}
                self.register(RemoteRegistryEntry(
                    identifier, fields.get("expected_reward"), fields.get("description"), fields.get("linux_url"),
                    fields.get("darwin_url"), fields.get("win_url"), fields.get("additional_args"),
                    fields.get("sha256"), store,
                ))  # fmt: skip

    def clear(self) -> None:
        self._entries.clear()

    def __getitem__(self, identifier: str) -> BaseRegistryEntry:
        if identifier not in self._entries:
            raise KeyError(f"The entry {identifier} is not present in the registry.")
        return self._entries[identifier]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        yield from self._entries


def registry_file() -> Path:
    if configured := os.environ.get("UNIRENDER_REGISTRY"):
        return Path(configured).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "unirender" / "registry.yaml"


class _DefaultRegistry(UnityEnvRegistry):
    """Filled on first use from the store's named ML-Agents builds, then the user's registry file."""

    def __init__(self) -> None:
        super().__init__()
        self._loaded = False

    def reload(self, store: BuildStore | None = None) -> None:
        self._loaded = True
        self._entries.clear()
        store = store or BuildStore()
        for build in store.list():
            if build.info.family != "mlagents":
                continue
            for name in build.names:
                self.register(StoreRegistryEntry(name, name, store=store))
                if name.endswith(":latest") or name.split(":")[0] not in self._entries:
                    self.register(StoreRegistryEntry(name.split(":")[0], name, store=store))
        if registry_file().is_file():
            self.register_from_yaml(registry_file(), store)

    def register(self, new_entry: BaseRegistryEntry) -> None:
        self._load()
        super().register(new_entry)

    def _load(self) -> None:
        if not self._loaded:
            self.reload()

    def __getitem__(self, identifier: str) -> BaseRegistryEntry:
        self._load()
        return super().__getitem__(identifier)

    def __len__(self) -> int:
        self._load()
        return super().__len__()

    def __iter__(self) -> Iterator[str]:
        self._load()
        return super().__iter__()


default_registry: UnityEnvRegistry = _DefaultRegistry()

__all__ = [
    "BaseRegistryEntry",
    "RemoteRegistryEntry",
    "StoreRegistryEntry",
    "UnityEnvRegistry",
    "default_registry",
]
