"""The HTTP API agrees with its own OpenAPI document: 405s name the allowed methods, and the served schema declares
the request shapes the API really accepts (in process: no route here reaches Temporal)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from docjobs.api.app import create_app
from docjobs.temporal.settings import TemporalSettings


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    yield TestClient(create_app(TemporalSettings.from_env()))  # no lifespan: nothing connects or is written


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/jobs", "GET, POST"),  # two routes share the path
        ("PUT", "/v1/batches", "POST"),
        ("POST", "/v1/templates", "GET"),
        ("GET", "/v1/templates/invoice", "PUT"),
        ("DELETE", "/v1/jobs/acme/job-1/cancel", "GET, POST"),  # `{job_id:path}` answers GET here too
        ("PATCH", "/v1/batches/acme/batch-1", "GET"),
        ("DELETE", "/openapi.json", "GET, HEAD"),
        ("POST", "/docs-assets/swagger-ui.css", "GET, HEAD"),
    ],
)
def test_405_names_the_allowed_methods(client: TestClient, method: str, path: str, allow: str) -> None:
    response = client.request(method, path)
    assert response.status_code == 405
    assert response.headers["Allow"] == allow
    assert response.json() == {"code": "http.method_not_allowed", "message": "Method Not Allowed"}


def multipart(schema: dict[str, Any], path: str) -> dict[str, Any]:
    body: dict[str, Any] = schema["paths"][path]["post"]["requestBody"]["content"]["multipart/form-data"]
    return body


def test_the_schema_declares_the_policy_part_and_the_template_rule(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    for path in ("/v1/jobs", "/v1/batches"):
        form = multipart(schema, path)
        assert form["encoding"] == {"policy": {"contentType": "application/json"}}
        policy = form["schema"]["properties"]["policy"]
        assert policy["type"] == "object"
        assert policy["properties"]["mode"]["anyOf"][0]["enum"] == ["structure", "raster"]
        assert policy["properties"]["ocr"]["anyOf"][0]["enum"] == ["off", "skip", "redo", "force"]
        assert policy["properties"]["redact_regions"]["items"]["pattern"].startswith("^[1-9]")
        assert form["schema"]["additionalProperties"] is False
    jobs = multipart(schema, "/v1/jobs")["schema"]
    assert jobs["dependentRequired"] == {"template": ["data"]}
    assert jobs["oneOf"] == [
        {"required": ["file"], "not": {"required": ["template"]}},
        {"required": ["template", "data"], "not": {"required": ["file"]}},
    ]
    batches = multipart(schema, "/v1/batches")["schema"]
    assert batches["required"] == ["file"] and batches["properties"]["file"]["minItems"] == 1
    stored = schema["paths"]["/v1/batches"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert stored["properties"]["policy"] == multipart(schema, "/v1/batches")["schema"]["properties"]["policy"]
