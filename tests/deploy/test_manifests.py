"""The deployment files no test here can run: Kubernetes manifests checked against the Kubernetes schemas offline
(kubernetes-validate ships them, strict: an unknown field is an error), and the service configurations they carry
loaded by the service's own config loader. The container image itself is checked by ``./dev container-test``.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

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


def test_raycluster_pod_templates_are_valid_kubernetes():
    (cluster,) = documents("raycluster.yaml")
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
    (cluster,) = documents("raycluster.yaml")
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
