"""The deployment files no test here can run: Kubernetes manifests checked against the Kubernetes schemas offline
(kubernetes-validate ships them, strict: an unknown field is an error), and the service configurations they carry
loaded by the service's own config loader. The container image itself is checked by ``./dev container-test``.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from unirender.builds.bounds import parse_size
from unirender.service.config import load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
VERSION = kubernetes_validate.latest_version()


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((KUBERNETES / name).read_text()) if d]


def pod_template(template: dict) -> dict:
    """A RayCluster group's pod template as a core PodTemplate, which the Kubernetes schemas cover."""
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}


@pytest.mark.parametrize("name", ["service.yaml"])
def test_core_manifests_are_valid_kubernetes(name):
    docs = documents(name)
    assert {d["kind"] for d in docs} == {"ConfigMap", "PersistentVolumeClaim", "Deployment", "Service"}
    for doc in docs:
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_a_wrong_field_is_caught():
    deployment = next(d for d in documents("service.yaml") if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["resource"] = {}  # "resources" misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSION, strict=True)


def raycluster() -> dict:
    (cluster,) = [d for d in documents("raycluster.yaml") if d["kind"] == "RayCluster"]
    return cluster


def test_raycluster_pod_templates_are_valid_kubernetes():
    cluster = raycluster()
    for doc in documents("raycluster.yaml"):
        if doc["kind"] != "RayCluster":
            kubernetes_validate.validate(doc, VERSION, strict=True)
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    spec = cluster["spec"]
    templates = [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]
    for template in templates:
        kubernetes_validate.validate(pod_template(template), VERSION, strict=True)
    # KubeRay's RayCluster fields this file uses (checked against KubeRay's v1 CRD schema when it was written).
    assert set(spec) <= {"rayVersion", "headGroupSpec", "workerGroupSpecs"}
    assert set(spec["headGroupSpec"]) <= {"rayStartParams", "template"}
    for group in spec["workerGroupSpecs"]:
        assert set(group) <= {"groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template"}
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())  # the CRD's map of strings


def test_every_pod_runs_as_the_images_non_root_user():
    deployment = next(d for d in documents("service.yaml") if d["kind"] == "Deployment")
    cluster = raycluster()
    pods = [deployment["spec"]["template"]["spec"], cluster["spec"]["headGroupSpec"]["template"]["spec"]]
    pods += [g["template"]["spec"] for g in cluster["spec"]["workerGroupSpecs"]]
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
        for container in pod["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_the_service_configurations_load(tmp_path, monkeypatch):
    monkeypatch.delenv("UNIRENDER_TOKENS", raising=False)
    container = load_config(DEPLOY / "container" / "service.yaml")
    assert (container.host, container.port, str(container.data_root)) == ("0.0.0.0", 8200, "/data")
    assert not container.auth_enabled and not container.allow_open  # so serve refuses to start without tokens
    config_map = next(d for d in documents("service.yaml") if d["kind"] == "ConfigMap")
    path = tmp_path / "service.yaml"
    path.write_text(config_map["data"]["service.yaml"])
    config = load_config(path)
    assert str(config.data_root) == "/data" and "builtin" in config.allowed_executables
    assert all(e == "builtin" or e.startswith("/builds/") for e in config.allowed_executables)


STORE = "/var/lib/unirender/builds"


def quantity(text: str) -> int:
    """A Kubernetes storage quantity (the binary suffixes these files use) in bytes."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    return int(text[:-2]) * units[text[-2:]] if text[-2:] in units else int(text)


def store_pods() -> list[tuple[str, dict, dict]]:
    """(what, pod spec, PVCs by name) for the service, the Ray head and each Ray worker group."""
    claims = {d["metadata"]["name"]: d for name in ("service.yaml", "raycluster.yaml") for d in documents(name)
              if d["kind"] == "PersistentVolumeClaim"}  # fmt: skip
    deployment = next(d for d in documents("service.yaml") if d["kind"] == "Deployment")
    cluster = raycluster()
    pods = [("service", deployment["spec"]["template"]["spec"]),
            ("ray head", cluster["spec"]["headGroupSpec"]["template"]["spec"])]
    pods += [(f"ray worker {g['groupName']}", g["template"]["spec"]) for g in cluster["spec"]["workerGroupSpecs"]]
    return [(what, pod, claims) for what, pod in pods]


@pytest.mark.parametrize("what,pod,claims", store_pods(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_build_store_is_a_writable_volume_of_its_own_bounded_below_its_size(what, pod, claims):
    """The store is not under the home folder (a 1Gi emptyDir: uploads lost on restart, a large build does not
    fit): UNIRENDER_BUILDS names a writable volume mounted there alone, and UNIRENDER_BUILDS_MAX_BYTES is below
    the volume's size, so eviction comes before a full disk."""
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["UNIRENDER_BUILDS"] == STORE, what
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == STORE]
    assert not mount.get("readOnly") and "subPath" not in mount, what
    assert sum(m["name"] == mount["name"] for m in container["volumeMounts"]) == 1, f"{what}: shared volume"
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    if "persistentVolumeClaim" in volume:  # the service and the head: the store outlives the pod
        assert what in ("service", "ray head"), what
        claim_ref = volume["persistentVolumeClaim"]
        assert not claim_ref.get("readOnly"), what
        spec = claims[claim_ref["claimName"]]["spec"]
    else:  # a worker: its cache of fetched builds, as long as the pod lives, on storage provisioned for it
        assert what.startswith("ray worker") and "emptyDir" not in volume, what
        spec = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert "ReadWriteOnce" in spec["accessModes"], what
    size = quantity(spec["resources"]["requests"]["storage"])
    bound = parse_size(env["UNIRENDER_BUILDS_MAX_BYTES"])
    assert bound is not None and bound < size, f"{what}: bound {bound} not below the volume's {size}"
    assert size >= 50 * 2**30, f"{what}: {size} bytes is too small for Unity builds of several GB"
    if what == "service":  # the volume also stages one upload (its archive and its files) above the bound
        limits = yaml.safe_load(next(d for d in documents("service.yaml")
                                     if d["kind"] == "ConfigMap")["data"]["service.yaml"])["limits"]  # fmt: skip
        assert bound + 2 * limits["build_bytes"] <= size
        # checked before eviction: below the bound it would refuse uploads that eviction could make room for
        assert limits["build_store_bytes"] >= bound + limits["build_bytes"]


def test_the_container_keeps_its_store_on_a_volume_of_its_own():
    text = (DEPLOY.parent / "Containerfile").read_text()
    assert f"UNIRENDER_BUILDS={STORE}" in text
    assert any(line.startswith("VOLUME") and STORE in line for line in text.splitlines())
    assert str(load_config(DEPLOY / "container" / "service.yaml").build_store) == STORE
