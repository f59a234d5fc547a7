"""The providers' SDKs, as data: by provider family (:attr:`forkpoint.providers.base.Provider.name`),
their distribution names (whose versions go into a session header), their top-level module names
(never an agent's own code) and the environment variables they refuse to start without (a replay
sets placeholders for those a recording had).

The one table of them: :mod:`forkpoint.providers` answers from it, and a session header reads it
here, without loading the providers' wire formats (``forkpoint record``'s own process loads none:
issue 15, start-up). A provider whose SDK needs its versions kept or its key set adds its entry.
"""

from __future__ import annotations

from collections.abc import Iterable


class Sdk:
    """One provider's SDKs (see the module docstring)."""

    __slots__ = ("api_key_vars", "modules", "packages")

    def __init__(
        self, packages: tuple[str, ...], modules: tuple[str, ...], api_key_vars: tuple[str, ...]
    ) -> None:
        self.packages = packages
        self.modules = modules
        self.api_key_vars = api_key_vars


#: Provider family → its SDKs, in the order of the providers' registry (a header lists them so).
SDKS: dict[str, Sdk] = {
    "bedrock": Sdk(
        ("boto3", "botocore"), ("boto3", "botocore"), ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    ),
    "gemini": Sdk(("google-genai",), ("google",), ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
    "anthropic": Sdk(("anthropic",), ("anthropic",), ("ANTHROPIC_API_KEY",)),
    # (AzureOpenAI refuses to start without its own key)
    "openai": Sdk(("openai",), ("openai",), ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY")),
}


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def api_key_vars() -> tuple[str, ...]:
    """Environment variables the providers' SDKs insist on."""
    return _unique(v for sdk in SDKS.values() for v in sdk.api_key_vars)


def sdk_packages() -> tuple[str, ...]:
    """Distribution names of the providers' SDKs."""
    return _unique(n for sdk in SDKS.values() for n in sdk.packages)


def sdk_modules() -> frozenset[str]:
    """Top-level module names of the providers' SDKs."""
    return frozenset(n for sdk in SDKS.values() for n in sdk.modules)
