"""The ``external`` environment: benchmark clusters that already exist (docs/external.md)."""

from .environment import ExternalEnvironment, ExternalSettingsError, external_settings, lease_scope

__all__ = ["ExternalEnvironment", "ExternalSettingsError", "external_settings", "lease_scope"]
