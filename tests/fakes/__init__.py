"""Test doubles other tests can reuse (fake HTTP services)."""
