"""The README's settings table and the order of the settings sources, checked against
:class:`crowdpref.settings.Settings` (README "Configuration"; the module docstring of
crowdpref/settings.py): every environment name the table lists sets its field, the defaults are
the ones it states, and keyword arguments beat the environment, which beats the YAML file, which
beats the defaults. Secrets are secret strings and never show in a repr."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import SecretStr

from crowdpref.settings import Settings, load_settings

README = Path(__file__).resolve().parents[2] / "README.md"


def _settings_table() -> list[tuple[list[str], list[str], str]]:
    """Rows of the README's ``| setting (file key) | environment | default |`` table: the field
    names, the environment names (``...`` left out) and the default cell."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| setting (file key) | environment |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        fields, env, default = (cell.strip() for cell in line.strip().strip("|").split("|"))
        rows.append((re.findall(r"`([a-z_]+)`", fields), re.findall(r"`([A-Z_]+)`", env), default))
    return rows


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No settings file and none of the table's environment names from the developer's shell."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CROWDPREF_SETTINGS", raising=False)
    for _, names, _ in _settings_table():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    for field in Settings.model_fields.values():
        for name in field.validation_alias.choices:  # type: ignore[union-attr]
            monkeypatch.delenv(str(name), raising=False)


def _value_for(field: str) -> tuple[str, object]:
    """An environment value for ``field`` and what the settings should hold for it."""
    annotation = str(Settings.model_fields[field].annotation)
    if "int" in annotation:
        return "7345", 7345
    if "Path" in annotation:
        return "/tmp/claims-x", Path("/tmp/claims-x")
    return "http://claims.example:1/x", "http://claims.example:1/x"


def test_the_table_lists_every_setting_once():
    listed = [f for fields, _, _ in _settings_table() for f in fields]
    assert len(listed) == len(set(listed))
    assert set(listed) == set(Settings.model_fields), "README settings table and Settings differ"


def _field_of(env_name: str) -> str | None:
    for name, field in Settings.model_fields.items():
        if env_name in field.validation_alias.choices:  # type: ignore[union-attr]
            return name
    return None


def test_every_environment_name_in_the_table_sets_its_field(clean_env, monkeypatch):
    checked = 0
    for fields, names, _ in _settings_table():
        for name in names:
            field = _field_of(name)
            assert field in fields, f"README: {name} is not an environment name of {fields}"
            raw, expected = _value_for(field)
            monkeypatch.setenv(name, raw)
            value = getattr(load_settings(), field)
            value = value.get_secret_value() if isinstance(value, SecretStr) else value
            assert value == expected, f"{name} does not set {field}"
            monkeypatch.delenv(name)
            checked += 1
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
    table = {f: default for fields, _, default in _settings_table() for f in fields}
    assert "6479" in table["redis_port"] and "`.crowdpref`" in table["home"]


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
               "CROWDPREF_DATABASE_URL": "postgresql+psycopg://u:pw-claims-secret@h:5432/db"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    s = load_settings()
    for field in ("argilla_api_key", "prolific_token", "hf_token", "openai_api_key", "database_url"):
        assert isinstance(getattr(s, field), SecretStr), field
    shown = repr(s) + str(s) + repr(s.model_dump())
    assert not [v for v in secrets.values() if v in shown]
