"""Extract the response schemas the conformance test needs from OpenAI's published OpenAPI spec.

Usage: python3 scripts/vendor_openai_schemas.py GIT_DIR_OF_openai-openapi [COMMIT] > tests/data/openai_schemas.json
(the clone's `openapi.yaml` at COMMIT, default HEAD, is read with `git show`)

The source is `openapi.yaml` of https://github.com/openai/openai-openapi (MIT licence). The script
takes the ROOTS below and every schema they reach through `$ref`, rewrites `#/components/schemas/X`
to `#/$defs/X`, and turns OpenAPI's `nullable: true` into JSON Schema's `"null"` alternative, so
that plain `jsonschema` can validate against them. Nothing else is changed.
"""
from __future__ import annotations

import json
import subprocess
import sys

import yaml

ROOTS = ["CreateChatCompletionResponse", "CreateChatCompletionStreamResponse", "CreateCompletionResponse",
         "ListModelsResponse", "Model", "ErrorResponse"]
PREFIX = "#/components/schemas/"


def convert(node):
    """A schema node with refs rewritten and `nullable` expanded; collects the names it refers to."""
    if isinstance(node, list):
        return [convert(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: convert(v) for k, v in node.items() if k != "nullable"}
    if "$ref" in out:
        out["$ref"] = "#/$defs/" + out["$ref"].removeprefix(PREFIX)
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def refs(node) -> set[str]:
    if isinstance(node, list):
        return set().union(*map(refs, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {node["$ref"].removeprefix(PREFIX)} if isinstance(node.get("$ref"), str) else set()
    return found.union(*map(refs, node.values())) if node else found


def main(git_dir: str, ref: str = "HEAD") -> None:
    git = lambda *a: subprocess.run(["git", "-C", git_dir, *a], capture_output=True, text=True, check=True).stdout
    commit = git("rev-parse", ref).strip()
    spec = yaml.safe_load(git("show", f"{commit}:openapi.yaml"))
    schemas = spec["components"]["schemas"]
    todo, seen = list(ROOTS), set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(refs(schemas[name]) - seen)
    out = {"$comment": {"source": "https://github.com/openai/openai-openapi openapi.yaml",
                        "commit": commit, "version": spec["info"]["version"],
                        "licence": spec["info"]["license"]["name"],
                        "extracted_by": "scripts/vendor_openai_schemas.py (the ROOTS and every schema they $ref; "
                                        "nullable -> anyOf null; refs -> #/$defs)",
                        "roots": ROOTS},
           "$defs": {name: convert(schemas[name]) for name in sorted(seen)}}
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
