"""The Helm chart in helm/tableservice, rendered with the real Helm engine (PyPI `helm-python-sdk`, Helm v4 as a
shared library) for several sets of values: `helm lint --strict`, every object validated offline against the
Kubernetes OpenAPI schemas (`kubernetes-validate --strict`) for an older and a newer Kubernetes, values.schema.json
checked against its metaschema and refusing bad values, the rendered configuration loads with the daemon's own
loader, and the objects carry the values they should (security context, probes, RBAC, PDB, spread, monitoring)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tableservice.config import load_config
from tests.support.fixtures import in_ci

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "tableservice"
ALERTS = REPO / "deploy" / "prometheus" / "tableservice-alerts.yaml"
RELEASE = "ts"
NAMESPACE = "lake"
KUBE_VERSIONS = ("1.30.0", "1.35.0")
MONITORING_API = "monitoring.coreos.com/v1"
FULLNAME = f"{RELEASE}-tableservice"

ZOOKEEPER_VALUES: dict[str, Any] = {
    "replicas": 2,
    "config": {
        "locks": {
            "hoodie.write.lock.provider": "zookeeper",
            "hoodie.write.lock.zookeeper.url": "zk-0.zk:2181,zk-1.zk:2181",
            "hoodie.write.lock.zookeeper.base_path": "/hudi/locks",
        },
        "tables": [{"uri": "s3://lake/warehouse/trips", "locks": {"hoodie.write.lock.zookeeper.lock_key": "trips"}}],
        "defaults": {"compaction": {"hoodie.parquet.max.file.size": 125829120}},
    },
}
IRSA_ROLE = "arn:aws:iam::123456789012:role/tableservice"
DYNAMODB_VALUES: dict[str, Any] = {
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": IRSA_ROLE}},
    "extraEnvFrom": [{"configMapRef": {"name": "aws-settings"}}, {"secretRef": {"name": "extra", "optional": True}}],
    "extraEnv": [{"name": "AWS_REGION", "value": "eu-west-1"}],
    "http": {"statusTokenSecret": {"name": "tableservice-status", "key": "bearer"}},
    "config": {
        "locks": {
            "hoodie.write.lock.provider": "dynamodb",
            "hoodie.write.lock.dynamodb.table": "hudi-locks",
            "hoodie.write.lock.dynamodb.region": "eu-west-1",
        },
        "tables": [{"uri": "s3://lake/warehouse/trips"}],
    },
}
SPARK_VALUES: dict[str, Any] = {
    "image": {"repository": "registry.example/tableservice", "tag": "1.2.3"},
    "spark": {"kubernetes": {"enabled": True, "driverPort": 7078, "blockManagerPort": 7079}},
    "networkPolicy": {"enabled": True},
    "config": {"spark": {"conf": {"spark.executor.instances": "2", "spark.executor.memory": "2g"}}},
}
MONITORING_VALUES: dict[str, Any] = {
    "monitoring": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus"}},
    }
}
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "replicas3": {"replicas": 3},
    "zookeeper": ZOOKEEPER_VALUES,
    "dynamodb-irsa": DYNAMODB_VALUES,
    "spark-kubernetes": SPARK_VALUES,
    "monitoring": MONITORING_VALUES,
}


def _missing(what: str, install: str) -> None:
    if in_ci():
        pytest.fail(f"{what} is missing in CI ({install})")
    pytest.skip(f"{what} not found ({install})")


def _helm() -> ModuleType:
    try:
        import helm_python
    except (ImportError, OSError) as e:  # OSError: the shared library does not load here
        _missing(f"helm-python-sdk ({e})", "pip install -e '.[test]'")
    return helm_python


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.exists():
        _missing(name, "pip install -e '.[test]'")
    return str(path)


def render_manifests(values: dict[str, Any], api_versions: list[str] | None = None) -> dict[str, str]:
    """Template path -> rendered text, as `helm template --namespace lake ts helm/tableservice -a ...`."""
    helm = _helm()
    from helm_python import _native  # the public Chart.render has no api_versions (.Capabilities.APIVersions)

    opts: dict[str, Any] = {"name": RELEASE, "namespace": NAMESPACE, "is_install": True}
    if api_versions:
        opts["api_versions"] = api_versions
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values)
        rendered = _native.call_string("helm_render", chart._raw(), json.dumps(values), json.dumps(opts))
    manifests: dict[str, str] = json.loads(rendered)
    return manifests


def render(values: dict[str, Any], api_versions: list[str] | None = None) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders (NOTES.txt left out)."""
    objects: list[dict[str, Any]] = []
    for path, text in sorted(render_manifests(values, api_versions).items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["tableservice"]
    return containers[0]


def rendered_config(objects: list[dict[str, Any]]) -> str:
    text: str = one(objects, "ConfigMap")["data"]["config.yaml"]
    return text


def _api_versions(name: str) -> list[str] | None:
    return [MONITORING_API] if name == "monitoring" else None


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    name: str = request.param
    yield name, render(VALUE_SETS[name], _api_versions(name))


# --- chart metadata, lint, schema ----------------------------------------------------------------------------------


def test_chart_metadata_follows_the_project() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"]
    import tableservice

    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "tableservice"
    assert chart["appVersion"] == tableservice.__version__


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_strict(name: str, kube_version: str) -> None:
    helm = _helm()
    report: dict[str, Any] = helm.lint(CHART, VALUE_SETS[name], strict=True, kube_version=f"v{kube_version}")
    assert report["errors"] == []
    # severity 2 = warning, 3 = error; 1 = info (e.g. "icon is recommended")
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    assert report["total_charts_linted"] == 1


def test_values_schema_is_valid_json_schema_and_accepts_the_defaults() -> None:
    tool = _tool("check-jsonschema")
    schema = CHART / "values.schema.json"
    meta = subprocess.run([tool, "--check-metaschema", str(schema)], capture_output=True, text=True)
    assert meta.returncode == 0, meta.stdout + meta.stderr
    defaults = subprocess.run(
        [tool, "--schemafile", str(schema), str(CHART / "values.yaml")], capture_output=True, text=True
    )
    assert defaults.returncode == 0, defaults.stdout + defaults.stderr


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"replicas": 0}, "replicas"),
        ({"replicas": "two"}, "replicas"),
        ({"replicas": 1.5}, "replicas"),
        ({"image": {"repository": "tableservice", "tag": 1}}, "tag"),
        ({"resources": "2Gi"}, "resources"),
        ({"replicaCount": 2}, "replicaCount"),
        ({"spark": {"kubernetes": {"enabled": "yes"}}}, "enabled"),
        ({"http": {"port": 70000}}, "port"),
        ({"http": {"statusTokenSecret": {"name": "s", "key": ""}}}, "key"),
        ({"http": {"statusTokenSecret": {"name": "s", "token": "inline"}}}, "token"),
        ({"securityContext": {"runAsUser": 0, "runAsGroup": 10001, "fsGroup": 10001}}, "runAsUser"),
        ({"extraEnvFrom": [{"secretRef": {"name": "aws", "stringData": {"k": "v"}}}]}, "extraEnvFrom"),
        ({"config": "service: {}"}, "config"),
    ],
)
def test_schema_refuses_bad_values(values: dict[str, Any], key: str) -> None:
    helm = _helm()
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmValuesError) as refused:
            chart.validate_schema(values)
        assert key in str(refused.value)
        with pytest.raises(helm.HelmError):
            chart.render(values, name=RELEASE, namespace=NAMESPACE)


# --- every object valid for Kubernetes -----------------------------------------------------------------------------


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_objects_validate_strictly(
    rendered: tuple[str, list[dict[str, Any]]], kube_version: str, tmp_path: Path
) -> None:
    tool = _tool("kubernetes-validate")
    name, objects = rendered
    files = []
    for i, obj in enumerate(objects):
        path = tmp_path / f"{i:02d}-{obj['kind']}.yaml"
        path.write_text(yaml.safe_dump(obj))
        files.append(str(path))
    checked = subprocess.run(
        [tool, "--strict", "-k", kube_version, *files], capture_output=True, text=True, cwd=tmp_path
    )
    assert checked.returncode == 0, f"{name}: {checked.stdout}{checked.stderr}"
    builtin = [o for o in objects if not o["apiVersion"].startswith("monitoring.coreos.com/")]
    passed = set(re.findall(rf"passed for resource (\S+) against version {kube_version[:4]}", checked.stdout))
    assert passed == {f"{o['kind'].lower()}/{o['metadata']['name']}" for o in builtin}, checked.stdout
    for obj in objects:
        assert obj["metadata"]["namespace"] == NAMESPACE
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


# --- configuration ---------------------------------------------------------------------------------------------------


def test_rendered_config_loads_with_the_daemon_loader(
    rendered: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    name, objects = rendered
    path = tmp_path / "config.yaml"
    path.write_text(rendered_config(objects))
    config = load_config(str(path), env={})
    assert config.service.http.host == "0.0.0.0"
    assert config.service.http.port == 9464
    values = VALUE_SETS[name]
    provider = values.get("config", {}).get("locks", {}).get("hoodie.write.lock.provider", "in-process")
    assert yaml.safe_load(path.read_text())["locks"]["hoodie.write.lock.provider"] == provider
    assert [t.uri for t in config.tables] == [t["uri"] for t in values.get("config", {}).get("tables", [])]
    deployment = one(objects, "Deployment")
    annotation = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert annotation == hashlib.sha256(rendered_config(objects).rstrip("\n").encode()).hexdigest()


def test_zookeeper_config_keeps_the_lock_and_large_numbers(tmp_path: Path) -> None:
    objects = render(ZOOKEEPER_VALUES)
    data = yaml.safe_load(rendered_config(objects))
    assert data["locks"] == ZOOKEEPER_VALUES["config"]["locks"]
    assert data["defaults"]["compaction"]["hoodie.parquet.max.file.size"] == 125829120
    path = tmp_path / "config.yaml"
    path.write_text(rendered_config(objects))
    assert load_config(str(path), env={}).tables[0].uri == "s3://lake/warehouse/trips"


def test_checksum_annotation_changes_with_the_config() -> None:
    def checksum(values: dict[str, Any]) -> str:
        deployment = one(render(values), "Deployment")
        value: str = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        return value

    base = checksum({})
    assert checksum({"replicas": 1, "image": {"repository": "tableservice", "tag": "other"}}) == base
    assert checksum({"config": {"service": {"poll_interval_seconds": 60}}}) != base
    assert checksum(ZOOKEEPER_VALUES) != base
    assert checksum({"http": {"port": 9500}}) != base


# --- workload ---------------------------------------------------------------------------------------------------------


def test_deployment_defaults() -> None:
    objects = render({})
    deployment = one(objects, "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    c = container(objects)
    assert spec["replicas"] == 1
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert c["image"] == "tableservice:0.1.0"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert [*c["command"], *c["args"]] == ["tableservice", "run", "--config", "/etc/tableservice/config.yaml"]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 9464}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["startupProbe"]["httpGet"]["port"] == "http"
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "envFrom" not in c
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/etc/tableservice"]]["configMap"]["name"] == one(objects, "ConfigMap")["metadata"]["name"]
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert "emptyDir" in volumes[mounts[env["SPARK_LOCAL_DIRS"]["value"]]]
    assert pod["serviceAccountName"] == one(objects, "ServiceAccount")["metadata"]["name"] == FULLNAME
    assert pod["terminationGracePeriodSeconds"] > 120  # longer than the daemon's shutdown_grace_seconds
    service = one(objects, "Service")
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("http", 9464, "http")]
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert by_kind(objects, "NetworkPolicy") == []


def test_security_context(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    sc = container(objects)["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert (sc["runAsUser"], sc["runAsGroup"]) == (10001, 10001)


def test_security_context_ids_come_from_values() -> None:
    objects = render({"securityContext": {"runAsUser": 2000, "runAsGroup": 3000, "fsGroup": 4000}})
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"], pod["fsGroup"]) == (2000, 3000, 4000)


@pytest.mark.parametrize(("replicas", "spread"), [(1, False), (2, True), (3, True)])
def test_pdb_and_topology_spread_only_with_several_replicas(replicas: int, spread: bool) -> None:
    objects = render({"replicas": replicas})
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == replicas
    selector = deployment["spec"]["selector"]["matchLabels"]
    if not spread:
        assert by_kind(objects, "PodDisruptionBudget") == []
        assert "topologySpreadConstraints" not in pod
        return
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    constraints = pod["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in constraints] == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    assert all(c["labelSelector"] == {"matchLabels": selector} for c in constraints)


def test_irsa_annotation_and_secrets_by_reference() -> None:
    objects = render(DYNAMODB_VALUES)
    account = one(objects, "ServiceAccount")
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": IRSA_ROLE}
    c = container(objects)
    assert c["envFrom"] == DYNAMODB_VALUES["extraEnvFrom"]
    assert {"name": "AWS_REGION", "value": "eu-west-1"} in c["env"]
    assert by_kind(objects, "Secret") == []
    config = yaml.safe_load(rendered_config(objects))
    assert config["locks"]["hoodie.write.lock.dynamodb.table"] == "hudi-locks"


def test_status_token_from_an_existing_secret(tmp_path: Path) -> None:
    objects = render(DYNAMODB_VALUES)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in container(objects)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["status-token"]["secret"] == {
        "secretName": "tableservice-status",
        "items": [{"key": "bearer", "path": "token"}],
        "defaultMode": 0o440,
    }
    assert mounts["status-token"] == {
        "name": "status-token",
        "mountPath": "/var/run/tableservice/status-token",
        "readOnly": True,
    }
    path = tmp_path / "config.yaml"
    path.write_text(rendered_config(objects))
    http = load_config(str(path), env={}).service.http
    assert http.status_token_file == "/var/run/tableservice/status-token/token"
    # Without the Secret: no volume, and the daemon is started without a token (and warns).
    defaults = render({})
    assert "status-token" not in {v["name"] for v in one(defaults, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert "status_token_file" not in yaml.safe_load(rendered_config(defaults))["service"]["http"]


@pytest.mark.parametrize("claim", ["", "tableservice-state"])
def test_action_history_on_its_own_volume(tmp_path: Path, claim: str) -> None:
    objects = render({"history": {"existingClaim": claim}} if claim else {})
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in container(objects)["volumeMounts"]}
    volume = {v["name"]: v for v in pod["volumes"]}[mounts["/var/lib/tableservice"]]
    if claim:
        assert volume["persistentVolumeClaim"] == {"claimName": claim}
    else:
        assert volume["emptyDir"] == {"sizeLimit": "256Mi"}
    path = tmp_path / "config.yaml"
    path.write_text(rendered_config(objects))
    history = load_config(str(path), env={}).service.history
    assert history.enabled and history.path == "/var/lib/tableservice/history.sqlite"


def test_existing_service_account() -> None:
    objects = render({"serviceAccount": {"create": False, "name": "shared"}})
    assert by_kind(objects, "ServiceAccount") == []
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "shared"


# --- Spark on Kubernetes ----------------------------------------------------------------------------------------------


def test_no_role_without_spark_on_kubernetes(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    name, objects = rendered
    enabled = VALUE_SETS[name].get("spark", {}).get("kubernetes", {}).get("enabled", False)
    assert bool(by_kind(objects, "Role")) == enabled
    assert bool(by_kind(objects, "RoleBinding")) == enabled


def test_spark_on_kubernetes(tmp_path: Path) -> None:
    objects = render(SPARK_VALUES)
    role = one(objects, "Role")
    rules = {(r["apiGroups"][0], res): set(r["verbs"]) for r in role["rules"] for res in r["resources"]}
    assert rules == {
        ("", "pods"): {"get", "list", "watch", "create", "delete", "deletecollection"},
        ("", "configmaps"): {"create", "get", "list", "watch", "delete", "deletecollection"},
        ("", "services"): {"get", "list", "create", "delete", "deletecollection"},
        ("", "persistentvolumeclaims"): {"get", "list", "create", "delete", "deletecollection"},
    }
    binding = one(objects, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}
    ]
    assert pod["automountServiceAccountToken"] is True

    service = one(objects, "Service")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "http": 9464,
        "spark-driver": 7078,
        "spark-blockmgr": 7079,
    }
    c = container(objects)
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {
        "http": 9464,
        "spark-driver": 7078,
        "spark-blockmgr": 7079,
    }

    text = rendered_config(objects)
    spark = yaml.safe_load(text)["spark"]
    assert spark["master"] == "k8s://https://kubernetes.default.svc"
    assert spark["conf"] == {
        "spark.executor.instances": "2",
        "spark.executor.memory": "2g",
        "spark.kubernetes.namespace": NAMESPACE,
        "spark.kubernetes.container.image": "registry.example/tableservice:1.2.3",
        "spark.driver.port": "7078",
        "spark.blockManager.port": "7079",
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.kubernetes.executor.podTemplateFile": "/etc/tableservice/executor-pod-template.yaml",
    }
    # the executor pod template is in the ConfigMap mounted at /etc/tableservice: a valid Pod, hardened like the daemon
    template = yaml.safe_load(one(objects, "ConfigMap")["data"]["executor-pod-template.yaml"])
    assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/etc/tableservice"}
    assert (template["apiVersion"], template["kind"]) == ("v1", "Pod")
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    (executor,) = template["spec"]["containers"]
    assert executor["securityContext"]["readOnlyRootFilesystem"] is True
    assert executor["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    template_file = tmp_path / "executor-pod-template.yaml"
    template_file.write_text(yaml.safe_dump({**template, "metadata": {"name": "executor"}}))
    validated = subprocess.run(
        [_tool("kubernetes-validate"), "--strict", "-k", "1.30.0", str(template_file)], capture_output=True, text=True
    )
    assert validated.returncode == 0, validated.stdout + validated.stderr
    # spark.driver.host and spark.kubernetes.driver.pod.name: environment overrides from the downward API, applied
    # by the daemon's loader. Simulate the kubelet: give each fieldRef variable its value.
    field_values = {"status.podIP": "10.1.2.3", "metadata.name": f"{FULLNAME}-7d9f-abcde"}
    env = {
        e["name"]: field_values[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in c["env"]
        if e["name"].startswith("TABLESERVICE__")
    }
    assert env == {
        "TABLESERVICE__SPARK__CONF__spark.driver.host": "10.1.2.3",
        "TABLESERVICE__SPARK__CONF__spark.kubernetes.driver.pod.name": f"{FULLNAME}-7d9f-abcde",
    }
    path = tmp_path / "config.yaml"
    path.write_text(text)
    config = load_config(str(path), env=env)
    assert config.spark.master == "k8s://https://kubernetes.default.svc"
    assert config.spark.conf["spark.driver.host"] == "10.1.2.3"
    assert config.spark.conf["spark.kubernetes.driver.pod.name"] == f"{FULLNAME}-7d9f-abcde"
    assert config.spark.conf["spark.driver.port"] == "7078"

    policy = one(objects, "NetworkPolicy")
    assert policy["spec"]["podSelector"] == {
        "matchLabels": one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    }
    ports = [[p["port"] for p in rule["ports"]] for rule in policy["spec"]["ingress"]]
    assert ports == [["http"], ["spark-driver", "spark-blockmgr"]]


def test_spark_executor_image_override() -> None:
    values = {"spark": {"kubernetes": {"enabled": True, "image": "registry.example/executor:9"}}}
    spark = yaml.safe_load(rendered_config(render(values)))["spark"]
    assert spark["conf"]["spark.kubernetes.container.image"] == "registry.example/executor:9"


# --- monitoring -------------------------------------------------------------------------------------------------------


def test_monitoring_objects_need_the_operator_api() -> None:
    assert by_kind(render(MONITORING_VALUES), "ServiceMonitor") == []
    assert by_kind(render(MONITORING_VALUES), "PrometheusRule") == []
    notes = render_manifests(MONITORING_VALUES)["tableservice/templates/NOTES.txt"]
    assert "no monitoring.coreos.com/v1 API" in notes
    default = render({}, [MONITORING_API])
    assert by_kind(default, "ServiceMonitor") == by_kind(default, "PrometheusRule") == []


def test_service_monitor_and_prometheus_rule() -> None:
    objects = render(MONITORING_VALUES, [MONITORING_API])
    monitor = one(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == MONITORING_API
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    assert monitor["spec"]["selector"]["matchLabels"] == one(objects, "Service")["spec"]["selector"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert [(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]] == [("http", "/metrics")]
    rule = one(objects, "PrometheusRule")
    assert rule["apiVersion"] == MONITORING_API
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]


def test_chart_alerts_are_the_repository_alerts() -> None:
    assert (CHART / "files" / "alerts.yaml").read_bytes() == ALERTS.read_bytes()


def test_notes_warn_about_several_replicas_with_the_in_process_lock() -> None:
    assert "in-process lock" in render_manifests({"replicas": 2})["tableservice/templates/NOTES.txt"]
    assert "in-process lock" not in render_manifests(ZOOKEEPER_VALUES)["tableservice/templates/NOTES.txt"]


def _strict_crd_schema(model: Any) -> dict[str, Any]:
    """The JSON schema of a Prometheus-operator resource (the CRD's fields, from its generated model), with unknown
    fields refused at every level."""
    schema: dict[str, Any] = model.model_json_schema(by_alias=True)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def test_monitoring_objects_match_the_operator_crds() -> None:
    try:
        from cloudcoil.models.prometheus_operator import v1 as operator
    except ImportError:
        _missing("cloudcoil-models-prometheus-operator", "pip install -e '.[test]'")
    import jsonschema

    objects = render(MONITORING_VALUES, [MONITORING_API])
    for kind, model in (("ServiceMonitor", operator.ServiceMonitor), ("PrometheusRule", operator.PrometheusRule)):
        validator = jsonschema.Draft202012Validator(_strict_crd_schema(model))
        obj = one(objects, kind)
        assert [e.message for e in validator.iter_errors(obj)] == [], kind
        broken = json.loads(json.dumps(obj))
        broken["spec"]["unknownField"] = 1  # what a typo in the template would give
        assert list(validator.iter_errors(broken)), kind
