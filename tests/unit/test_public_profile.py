"""The public profile's pieces that need no running service: the Caddyfile written from the
settings (checked by Debian's caddy itself where it is installed), the portal's environment
(only the settings it uses), the proxy the portal trusts by default, and how ``crowdpref
status`` words the certificate."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from crowdpref.errors import ConfigError
from crowdpref.portal.app import trusted_proxies
from crowdpref.settings import Settings, load_settings
from services import caddy, portal
from tests.conftest import isolated_settings

SECRETS = {"hf_token": "hf_NEVERINPORTAL0123456789", "openai_api_key": "sk-NEVERINPORTAL0123456789",
           "prolific_token": "prolific-token-the-portal-needs", "argilla_api_key": "argilla.apikey.portal-needs"}


def _public(tmp_path: Path, **overrides: object) -> Settings:
    values: dict[str, object] = dict(public_url="https://study.example.org", public_tls="internal",
                                     https_port=18443, http_port=18080)
    values.update(overrides)
    return isolated_settings(tmp_path / "home", **values)


# --- the Caddyfile --------------------------------------------------------------------------------------
def test_the_caddyfile_routes_one_host_name_with_hsts_limits_and_query_free_logs(tmp_path):
    settings = _public(tmp_path, argilla_url="http://127.0.0.1:16900", argilla_api_key="k")
    text = caddy.caddyfile(settings)
    assert "\nstudy.example.org {\n" in text  # one site: the public host name
    assert "\thttps_port 18443\n" in text and "\thttp_port 18080\n" in text
    assert "\ttls internal\n" in text and "email" not in text
    assert "roll_size 50MiB" in text and "roll_keep 10" in text
    assert "admin off" in text  # no admin port beside the packaged caddy.service's 2019
    assert f'root "{settings.state_dir / "caddy" / "data"}"' in text  # certificates and CA in the state folder
    assert 'Strict-Transport-Security "max-age=31536000"' in text
    assert f"reverse_proxy @portal {settings.host}:{settings.portal_port}\n" in text
    assert "@portal path /s/* /hooks/* /healthz\n" in text
    assert "\t\treverse_proxy 127.0.0.1:16900\n" in text  # Argilla: everything else
    assert "max_size 64KiB" in text and "max_size 1MiB" in text and "max_size 16MiB" in text
    for limit in (64 * 1024, 1024 * 1024, 16 * 1024 * 1024):  # a declared size over it: 413 at once
        assert f"header_regexp Content-Length {caddy.over_regexp(limit)}\n" in text
    # both logs (the access log and Caddy's own, which records the request of a proxy error)
    for line in caddy.LOG_FILTERS:
        assert text.count(line) == 2, line
    assert 'request>uri regexp \\?.*$ ""' in caddy.LOG_FILTERS


def test_acme_needs_a_contact_address_and_gets_no_internal_ca(tmp_path):
    with pytest.raises(ConfigError, match=r"^acme_email \(CROWDPREF_ACME_EMAIL\) is not set: ") as missing:
        caddy.caddyfile(_public(tmp_path, public_tls="acme"))
    assert "\n" not in str(missing.value)
    with pytest.raises(ConfigError, match=r"'not an address' is not an e-mail address"):
        caddy.caddyfile(_public(tmp_path, public_tls="acme", acme_email="not an address"))
    text = caddy.caddyfile(_public(tmp_path, public_tls="acme", acme_email="ops@example.org"))
    assert "\temail ops@example.org\n" in text and "tls internal" not in text


def test_only_a_dns_host_name_goes_into_the_caddyfile(tmp_path):
    with pytest.raises(ConfigError, match=r"'bad_name.example.org' is not a DNS host name"):
        caddy.caddyfile(_public(tmp_path, public_url="https://bad_name.example.org"))
    with pytest.raises(ConfigError, match=r"public_url \(CROWDPREF_PUBLIC_URL\) is not set"):
        caddy.hostname(isolated_settings(tmp_path / "home"))


def test_on_the_laptop_stack_caddy_serves_the_same_routes_over_plain_http_on_host(tmp_path):
    """No public URL: one plain-HTTP origin on HOST:SITE_PORT (no ACME, no certificate, no HSTS),
    routed as the public profile is, which the portal's and Argilla's addresses then share."""
    laptop = isolated_settings(tmp_path / "home")
    text = caddy.caddyfile(laptop)
    assert f"\nhttp://:{laptop.site_port} {{\n\tbind 127.0.0.1\n" in text and "\tauto_https off\n" in text
    assert "tls" not in text and "Strict-Transport-Security" not in text and "https_port" not in text
    public = caddy.caddyfile(_public(tmp_path, portal_port=laptop.portal_port, argilla_port=laptop.argilla_port))
    routes = public[public.index("\t@portal path"):]
    assert routes in text  # the same matchers, refusals, limits and upstreams
    assert caddy.listen_port(laptop) == (laptop.site_port, "CROWDPREF_SITE_PORT")
    assert laptop.portal_public_url == laptop.argilla_participant_url == f"http://127.0.0.1:{laptop.site_port}"


def test_without_caddy_up_stops_with_one_line_naming_the_fix(tmp_path, monkeypatch):
    from crowdpref.errors import ServiceError
    from services import stack

    monkeypatch.setenv("PATH", str(tmp_path))  # no caddy on it
    monkeypatch.setattr(caddy, "DEBIAN_BINARIES", ())
    with pytest.raises(ServiceError) as missing:
        stack.up(isolated_settings(tmp_path / "home"), ["portal", "caddy"])  # the laptop stack needs it too
    assert not (tmp_path / "home").exists()  # nothing started, nothing written
    assert "\n" not in str(missing.value) and "`make setup` (as root)" in str(missing.value)
    assert "portal and Argilla on one origin" in str(missing.value)


@pytest.mark.skipif(shutil.which("caddy") is None, reason="Debian's caddy is not installed (make setup installs it)")
@pytest.mark.parametrize("tls", ["internal", "acme", "laptop"])
def test_caddy_itself_accepts_the_caddyfile(tmp_path, tls):
    settings = isolated_settings(tmp_path / "home") if tls == "laptop" else \
        _public(tmp_path, public_tls=tls, acme_email="ops@example.org")
    path = caddy.write_caddyfile(settings)
    done = subprocess.run([caddy.binary(), "validate", "--config", str(path), "--adapter", "caddyfile"],
                          env=caddy.env(settings), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Valid configuration" in done.stdout + done.stderr, done.stdout[-500:]


def test_caddy_restarts_when_its_caddyfile_changes(tmp_path):
    ports = {"portal_port": 16910, "argilla_port": 16900}
    first = caddy.spec(_public(tmp_path, **ports))
    again = caddy.spec(_public(tmp_path, **ports))
    moved = caddy.spec(_public(tmp_path, https_port=18444, **ports))
    assert first.env["CADDYFILE_SHA256"] == again.env["CADDYFILE_SHA256"] != moved.env["CADDYFILE_SHA256"]
    assert "CADDYFILE_" in moved.restart_on_change
    assert not any(key.startswith("CROWDPREF_") for key in first.env)  # no setting, no secret


# --- the portal's environment -----------------------------------------------------------------------------
def test_every_setting_is_either_given_to_the_portal_or_withheld():
    given, withheld = set(portal.PORTAL_SETTINGS), set(portal.NOT_FOR_PORTAL)
    assert not given & withheld
    assert given | withheld == set(Settings.model_fields)


def test_the_portal_gets_no_hub_or_llm_secret_not_even_from_a_settings_file(tmp_path, monkeypatch):
    settings = _public(tmp_path, **SECRETS)
    env = portal._env(settings)
    values = "\n".join(env.values())
    assert SECRETS["hf_token"] not in values and SECRETS["openai_api_key"] not in values
    assert not any(key.startswith(("CROWDPREF_HF_", "CROWDPREF_OPENAI_", "HF_", "OPENAI_")) for key in env)
    # what it uses is there
    assert env["CROWDPREF_PROLIFIC_TOKEN"] == SECRETS["prolific_token"]
    assert env["CROWDPREF_PUBLIC_URL"] == "https://study.example.org"
    # the embedded Argilla: owner sessions it mints with Argilla's signing key, never the owner's API key
    assert env["CROWDPREF_ARGILLA_OWNER_SESSION"] == "true" and "CROWDPREF_ARGILLA_API_KEY" not in env
    assert SECRETS["argilla_api_key"] not in values
    elsewhere = portal._env(_public(tmp_path, argilla_url="https://argilla.example.org", **SECRETS))
    assert elsewhere["CROWDPREF_ARGILLA_API_KEY"] == SECRETS["argilla_api_key"]  # another Argilla: its key
    assert elsewhere.get("CROWDPREF_ARGILLA_OWNER_SESSION", "False") == "False"
    # the portal, started from a folder whose settings file holds the Hub token and the LLM key,
    # loads its settings from its environment and that empty file only
    (tmp_path / "crowdpref.settings.yaml").write_text(yaml.safe_dump(
        {"hf_token": SECRETS["hf_token"], "openai_api_key": SECRETS["openai_api_key"]}))
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith(("CROWDPREF_", "HF_", "OPENAI_", "ARGILLA_", "PROLIFIC_")):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    loaded = load_settings()
    assert loaded.hf_token is None and loaded.openai_api_key is None
    assert loaded.prolific_token is not None and loaded.prolific_token.get_secret_value() == SECRETS["prolific_token"]
    assert loaded.state_dir == settings.state_dir and loaded.public_url == settings.public_url
    assert loaded.argilla_owner_session and loaded.argilla_api_key is None


# --- the proxy the portal trusts --------------------------------------------------------------------------
def _settings(**values: object) -> SimpleNamespace:
    return SimpleNamespace(**{"portal_trusted_proxies": None, "public_url": None, "host": "127.0.0.1", **values})


def test_in_the_public_profile_the_portal_trusts_the_stacks_caddy_on_host_by_default():
    assert trusted_proxies(_settings()) == frozenset()  # laptop stack: X-Forwarded-For is never believed
    assert trusted_proxies(_settings(public_url="https://s.example.org")) == {"127.0.0.1"}
    assert trusted_proxies(_settings(public_url="https://s.example.org", host="10.1.2.3")) == {"10.1.2.3"}
    assert trusted_proxies(_settings(public_url="https://s.example.org", host="0.0.0.0")) == {"127.0.0.1", "::1"}
    assert trusted_proxies(_settings(public_url="https://s.example.org", portal_trusted_proxies="10.9.9.9, 10.8.8.8")) \
        == {"10.9.9.9", "10.8.8.8"}


# --- what status says about the certificate -----------------------------------------------------------------
def test_the_certificate_line_names_the_expiry_or_why_there_is_none():
    now = 1_800_000_000.0
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(now + 30 * 86400))
    assert caddy.Certificate(now + 30 * 86400).describe(now) == f"certificate expires {stamp} (in 30 days)"
    assert caddy.Certificate(None, "none served on port 443 (ConnectionRefusedError)").describe(now) == \
        "certificate: none served on port 443 (ConnectionRefusedError)"


@hypothesis_settings(deadline=None)  # a busy machine: no per-example time limit
@given(limit=st.integers(min_value=0, max_value=10**9), value=st.integers(min_value=0, max_value=2 * 10**9))
def test_the_content_length_matcher_matches_exactly_the_sizes_over_the_limit(limit, value):
    pattern = re.compile(caddy.over_regexp(limit))
    assert bool(pattern.match(str(value))) == (value > limit)
    assert bool(pattern.match("00" + str(value))) == (value > limit)
    assert bool(pattern.match(str(limit + 1))) and not pattern.match(str(limit))


def test_argilla_delivers_its_webhooks_to_the_portal_directly_in_the_public_profile(tmp_path):
    from crowdpref.portal.argilla_hooks import hook_url

    settings = _public(tmp_path)  # the embedded Argilla, on this machine
    assert hook_url(settings) == f"http://127.0.0.1:{settings.portal_port}/hooks/argilla"
    elsewhere = _public(tmp_path, argilla_url="https://argilla.example.org", argilla_api_key="k")
    assert hook_url(elsewhere) == "https://study.example.org/hooks/argilla"  # through Caddy
    laptop = isolated_settings(tmp_path / "home")
    assert hook_url(laptop) == f"http://127.0.0.1:{laptop.portal_port}/hooks/argilla"


def test_with_the_services_on_every_address_caddy_still_dials_the_portal_on_loopback(tmp_path):
    settings = _public(tmp_path, host="0.0.0.0")
    assert f"reverse_proxy @portal 127.0.0.1:{settings.portal_port}\n" in caddy.caddyfile(settings)
    assert trusted_proxies(settings) == {"127.0.0.1", "::1"}  # and the portal trusts where it comes from


def test_the_fake_prolific_trusts_caddys_own_ca_to_deliver_webhooks(tmp_path):
    """In the public profile with Caddy's CA, the demo's and the rehearsal's fake Prolific delivers
    its webhooks to https://<public host>/hooks/prolific: it must trust that CA's root (without it,
    every delivery failed and the portal heard none)."""
    argv = list(portal.fake_prolific_spec(_public(tmp_path, public_tls="internal")).argv)
    assert argv[argv.index("--trust") + 1] == str(caddy.internal_root(_public(tmp_path, public_tls="internal")))
    assert "--trust" not in portal.fake_prolific_spec(_public(tmp_path, public_tls="acme", acme_email="o@example.org")).argv
