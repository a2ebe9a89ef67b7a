"""The engine arguments a user may give (`--engine-arg`, the engine_args of a spec): the
names LLM(...) takes, read from vLLM's source, and the first value vLLM's own config classes
refuse, found before the engine starts."""

from __future__ import annotations

from typing import Any, NamedTuple

from .compat import prepare_environment, restore_environment


def engine_argument_names() -> frozenset[str] | None:
    """The keyword arguments LLM(...) takes: the fields of vLLM's EngineArgs dataclass (its
    **kwargs go there) and LLM.__init__'s own parameters. Read from vLLM's source, not
    imported: an import takes 10-18 s on a 2-core CPU, and before the engine's environment
    is set it would leak settings (HF_HUB_OFFLINE is read when huggingface_hub is imported)
    into the engine. None when vLLM is absent or its source does not hold them where
    expected (then the engine start says what is wrong)."""
    import importlib.util
    from pathlib import Path
    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        return None
    root = Path(next(iter(found.submodule_search_locations)))
    fields = _dataclass_fields(root / "engine" / "arg_utils.py", "EngineArgs")
    params = _init_parameters(root / "entrypoints" / "llm.py", "LLM")
    return frozenset(fields | params) if fields else None


def _classes(path) -> dict:
    import ast
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError, ValueError):
        return {}
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _dataclass_fields(path, name: str) -> set[str]:
    """The annotated class attributes of `name` and of its bases defined in the same file
    (ClassVar annotations are no fields)."""
    import ast
    classes, names, todo = _classes(path), set(), [name]
    while todo:
        node = classes.get(todo.pop())
        if node is None:
            continue
        todo += [base.id for base in node.bases if isinstance(base, ast.Name)]
        names |= {stmt.target.id for stmt in node.body if isinstance(stmt, ast.AnnAssign)
                  and isinstance(stmt.target, ast.Name)
                  and "ClassVar" not in ast.unparse(stmt.annotation)}
    return names


def _init_parameters(path, name: str) -> set[str]:
    import ast
    node = _classes(path).get(name)
    init = next((f for f in (node.body if node else ()) if isinstance(f, ast.FunctionDef)
                 and f.name == "__init__"), None)
    if init is None:
        return set()
    args = init.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} - {"self"}


# Config classes whose fields are not the engine arguments of the same name: the whole
# config, and the draft's (its model, revision, max_model_len are the draft's own).
_NOT_ARGUMENT_CONFIGS = ("VllmConfig", "SpeculativeConfig")


class RefusedValue(NamedTuple):
    name: str
    value: Any
    config_field: str     # e.g. SchedulerConfig.max_num_seqs
    reason: str           # pydantic's message, one line


def refused_engine_argument(args: dict[str, Any]) -> RefusedValue | None:
    """The first engine argument whose value vLLM's own config classes refuse: each value
    validated by the core schema (type, bounds, vLLM's field validators) of every config
    field of its name, without building a config (a ModelConfig would read the model).
    vLLM is imported under the engine's environment (prepare_environment), as the engine
    start will import it. None: every value accepted, or vLLM cannot say here (the engine
    start then says what is wrong). None values are vLLM's own defaults and not checked."""
    given = {k: v for k, v in args.items() if v is not None}
    if not given:
        return None
    validators = _config_field_validators(frozenset(given))
    for name, value in given.items():
        for config_field, validator in validators.get(name, ()):
            reason = _refusal(validator, value)
            if reason is not None:
                return RefusedValue(name, value, config_field, reason)
    return None


def _refusal(validator, value) -> str | None:
    from pydantic_core import ValidationError
    try:
        validator.validate_python(value)
    except ValidationError as exc:
        return " ".join(str(exc.errors()[0]["msg"]).split())
    except Exception:  # noqa: BLE001 (a validator that needs the whole config: not ours)
        return None
    return None


def _config_field_validators(names: frozenset[str]) -> dict[str, list]:
    """name -> [(Class.field, validator)] for the config fields named `names`."""
    saved = prepare_environment()
    try:
        import vllm.config as configs
        from pydantic_core import SchemaValidator
    except Exception:  # noqa: BLE001 (vLLM does not import here: the engine start says why)
        return {}
    finally:
        restore_environment(saved)
    found: dict[str, list] = {}
    for class_name in sorted(dir(configs)):
        cls = getattr(configs, class_name)
        if class_name in _NOT_ARGUMENT_CONFIGS or not isinstance(cls, type):
            continue
        try:
            core_schema = getattr(cls, "__pydantic_core_schema__", None)
        except Exception:  # noqa: BLE001 (a class pydantic cannot build yet)
            continue
        for name, schema in _field_schemas(core_schema):
            if name in names:
                try:
                    found.setdefault(name, []).append(
                        (f"{class_name}.{name}", SchemaValidator(schema)))
                except Exception:  # noqa: BLE001 (a schema that stands only in its class)
                    continue
    return found


def _field_schemas(schema) -> list[tuple[str, dict]]:
    """(field name, its core schema) of a pydantic dataclass's core schema: the fields of
    its dataclass-args, each with the definitions its schema may refer to."""
    definitions: list = []
    while isinstance(schema, dict) and schema.get("type") != "dataclass-args":
        definitions += schema.get("definitions", []) if schema.get("type") == "definitions" \
            else []
        schema = schema.get("schema")
    if not isinstance(schema, dict):
        return []
    return [(f["name"], {"type": "definitions", "schema": f["schema"],
                         "definitions": definitions} if definitions else f["schema"])
            for f in schema.get("fields", ())]
