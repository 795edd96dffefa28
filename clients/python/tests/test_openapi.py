"""Every route, submission field, listing parameter and job field the client uses is in the
gateway's own /openapi.json."""

import httpx

from relay_client import _core


def test_the_client_uses_only_documented_api(stack):
    doc = httpx.get(stack.url + "/openapi.json").json()
    paths = doc["paths"]
    for method, path in _core.ROUTES_USED:
        assert path in paths and method in paths[path], (method, path)
    submit = paths["/jobs/{service_type}"]["post"]
    form = submit["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]
    query = {p["name"] for p in submit["parameters"] if "name" in p}
    for name in _core.SUBMIT_FIELDS_USED:
        assert name in form or name in query, name
    job = doc["components"]["schemas"]["Job"]["properties"]
    for name in _core.JOB_FIELDS_USED:
        assert name in job, name
    listed = {doc["components"]["parameters"][p["$ref"].split("/")[-1]]["name"]
              for p in paths["/jobs"]["get"]["parameters"] if "$ref" in p}
    for name in _core.LIST_PARAMS_USED:
        assert name in listed, name
