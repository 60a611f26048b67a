"""The settings reference and the order of the settings sources, checked against
:class:`crowdpref.settings.Settings` (the module docstring of crowdpref/settings.py; the settings
table of the docs, ``reference/settings.md``, which ``docs/gen_reference.py`` generates from
``Settings`` when the docs are built). The table is read exactly as the generator renders it, and
checked against what ``load_settings`` does at runtime: every setting is listed once, every
environment name the table lists sets its field, the defaults are the ones it states, and the
settings it calls secret are secret. Keyword arguments beat the environment, which beats the YAML
file, which beats the defaults. Secrets are secret strings and never show in a repr."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from crowdpref.settings import Settings, load_settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _settings_page() -> str:
    """``reference/settings.md`` exactly as ``make docs`` generates it."""
    sys.path.insert(0, str(DOCS))
    try:
        import gen_reference
    finally:
        sys.path.remove(str(DOCS))
    text, _missing = gen_reference.settings_page()
    return text


def _settings_table() -> list[tuple[list[str], list[str], str, str]]:
    """Rows of the generated ``| Setting / environment | Type | Default | Description |`` table:
    the field name (the first line of the first cell, in a list), the environment names (the
    lines below it), the default cell and the type cell."""
    lines = _settings_page().splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("| Setting / environment | Type | Default |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        names = cells[0].split("<br>")
        fields = re.findall(r"^`([a-z_]+)`$", names[0])
        env = [found for n in names[1:] for found in re.findall(r"^`([A-Z_]+)`$", n)]
        assert len(env) == len(names) - 1, f"not an environment name in {cells[0]}"
        rows.append((fields, env, cells[2], cells[1]))
    return rows


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No settings file and none of the table's environment names from the developer's shell."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CROWDPREF_SETTINGS", raising=False)
    for _, names, _, _ in _settings_table():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    for field in Settings.model_fields.values():
        for name in field.validation_alias.choices:  # type: ignore[union-attr]
            monkeypatch.delenv(str(name), raising=False)


def _value_for(field: str, other: bool = False) -> tuple[str, object]:
    """An environment value for ``field`` and what the settings should hold for it (``other``:
    a second, different one)."""
    annotation = str(Settings.model_fields[field].annotation)
    tail = "y" if other else "x"
    if field == "argilla_workers":  # 1-32 processes
        return ("3", 3) if other else ("2", 2)
    if "Literal" in annotation:  # each field's second choice, then its first
        choices = Settings.model_fields[field].annotation.__args__  # type: ignore[union-attr]
        return (choices[0], choices[0]) if other else (choices[1], choices[1])
    if "bool" in annotation:
        return ("true", True) if other else ("false", False)
    if "int" in annotation:
        return ("7346", 7346) if other else ("7345", 7345)
    if field == "public_url":  # https, a host name, no path
        return f"https://{tail}.claims.example", f"https://{tail}.claims.example"
    if "Path" in annotation:
        return f"/tmp/claims-{tail}", Path(f"/tmp/claims-{tail}")
    return f"http://claims.example:1/{tail}", f"http://claims.example:1/{tail}"


def _runtime(value: object) -> object:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def _stated_default(cell: str) -> object:
    """The value a default cell states: ``unset`` is None, a code span its text (quotes off)."""
    if cell == "unset":
        return None
    found = re.fullmatch(r'`"?(.*?)"?`', cell)
    assert found, f"settings table: not a default: {cell}"
    return found.group(1)


def test_the_table_lists_every_setting_once():
    listed = [f for fields, _, _, _ in _settings_table() for f in fields]
    assert len(listed) == len(set(listed))
    assert set(listed) == set(Settings.model_fields), "the generated settings table and Settings differ"


def _field_of(env_name: str) -> str | None:
    for name, field in Settings.model_fields.items():
        if env_name in field.validation_alias.choices:  # type: ignore[union-attr]
            return name
    return None


def test_every_environment_name_in_the_table_sets_its_field(clean_env, monkeypatch):
    checked = 0
    for fields, names, _, _ in _settings_table():
        for name in names:
            field = _field_of(name)
            assert field in fields, f"settings table: {name} is not an environment name of {fields}"
            raw, expected = _value_for(field)
            monkeypatch.setenv(name, raw)
            value = _runtime(getattr(load_settings(), field))
            assert value == expected, f"{name} does not set {field}"
            monkeypatch.delenv(name)
            checked += 1
        # the table lists all of a setting's environment names, and "the first taking precedence"
        (field,) = fields
        assert names == list(Settings.model_fields[field].validation_alias.choices), field  # type: ignore[union-attr]
        if len(names) > 1:
            (first_raw, first), (later_raw, _) = _value_for(field), _value_for(field, other=True)
            monkeypatch.setenv(names[0], first_raw)
            for later in names[1:]:
                monkeypatch.setenv(later, later_raw)
            assert _runtime(getattr(load_settings(), field)) == first, f"{names[0]} does not win for {field}"
            for name in names:
                monkeypatch.delenv(name)
    assert checked >= 25


def test_the_defaults_are_the_ones_the_table_states(clean_env):
    s = load_settings()
    assert (s.home, s.host) == (Path(".crowdpref"), "127.0.0.1")
    assert (s.argilla_port, s.prefect_port, s.redis_port) == (6900, 4200, 6479)
    assert (s.portal_port, s.fake_prolific_port) == (6910, 6920)
    assert s.argilla_venv == Path(".venv-argilla") and s.redis_bin is None
    assert s.portal_studies == Path("studies")
    assert s.prolific_api_url == "https://api.prolific.com/api/v1/"
    assert s.prolific_app_url == "https://app.prolific.com"
    unset = ("argilla_url", "argilla_api_key", "prefect_api_url", "database_url", "prolific_token",
             "prolific_workspace_id", "portal_url", "argilla_public_url", "hf_token", "hf_repo_id",
             "hf_endpoint", "openai_base_url", "openai_api_key", "openai_model")
    assert {name: getattr(s, name) for name in unset} == dict.fromkeys(unset)
    # "the embedded server": the URLs point at the embedded services on their ports
    assert s.argilla_api_url == "http://127.0.0.1:6900"
    # every default the generated table states is the one load_settings gives with nothing set
    rows = _settings_table()
    assert len(rows) == len(Settings.model_fields)
    for (field,), _, cell, kind in rows:
        stated, value = _stated_default(cell), _runtime(getattr(s, field))
        if value is None or stated is None:
            assert value is stated is None, f"settings table: {field} default {cell}, but it is {value!r}"
        else:
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            assert (Path(stated) == value) if isinstance(value, Path) else stated == shown, \
                f"settings table: {field} default {cell}, but it is {value!r}"
        # the type column: a setting is "secret text" exactly when it is a secret string at runtime
        annotation = str(Settings.model_fields[field].annotation)
        assert ("secret text" in kind) == ("SecretStr" in annotation), f"{field}: {kind}"
    table = {f: default for fields, _, default, _ in rows for f in fields}
    assert table["redis_port"] == "`6479`" and table["home"] == "`.crowdpref`"


def test_keyword_arguments_beat_the_environment_which_beats_the_file_which_beats_defaults(clean_env, monkeypatch,
                                                                                       tmp_path):
    (tmp_path / "crowdpref.settings.yaml").write_text(
        "argilla_port: 7001\nprefect_port: 7002\nredis_port: 7003\n", encoding="utf-8")
    monkeypatch.setenv("CROWDPREF_PREFECT_PORT", "7102")
    monkeypatch.setenv("CROWDPREF_REDIS_PORT", "7103")
    s = load_settings(redis_port=7203)
    assert (s.argilla_port, s.prefect_port, s.redis_port, s.portal_port) == (7001, 7102, 7203, 6910)
    # $CROWDPREF_SETTINGS names another file, which then replaces ./crowdpref.settings.yaml
    other = tmp_path / "elsewhere.yaml"
    other.write_text("portal_port: 7010\n", encoding="utf-8")
    monkeypatch.setenv("CROWDPREF_SETTINGS", str(other))
    s = load_settings()
    assert (s.argilla_port, s.portal_port) == (6900, 7010)


def test_home_is_never_read_from_dollar_home(clean_env, monkeypatch):
    monkeypatch.setenv("HOME", "/nonexistent-home")
    assert load_settings().home == Path(".crowdpref")


def test_secrets_are_secret_strings_and_never_show_in_a_repr(clean_env, monkeypatch):
    secrets = {"CROWDPREF_ARGILLA_API_KEY": "argilla-claims-secret", "PROLIFIC_TOKEN": "prolific-claims-secret",
               "HF_TOKEN": "hf_claimssecretclaimssecret", "OPENAI_API_KEY": "sk-claims-secret",
               "CROWDPREF_DATABASE_URL": "postgresql+psycopg://u:pw-claims-secret@h:5432/db",
               "CROWDPREF_BACKUP_REPOSITORY": "rest:https://u:repo-claims-secret@h:8000/crowdpref"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    s = load_settings()
    secret_fields = ("argilla_api_key", "prolific_token", "hf_token", "openai_api_key", "database_url",
                     "backup_repository")
    for field in secret_fields:
        assert isinstance(getattr(s, field), SecretStr), field
    # the settings the generated table calls secret are exactly these
    assert sorted(f for fields, _, _, kind in _settings_table() for f in fields if "secret text" in kind) \
        == sorted(secret_fields)
    shown = repr(s) + str(s) + repr(s.model_dump())
    assert not [v for v in secrets.values() if v in shown]
