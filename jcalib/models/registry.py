"""Registry of built-in models: ``get(name, **options)`` and ``available()``."""

from __future__ import annotations

import inspect
from collections.abc import Callable

__all__ = ["available", "get", "register"]

_FACTORIES: dict[str, Callable] = {}


def register(name: str) -> Callable[[Callable], Callable]:
    """Decorator registering a model factory under ``name``."""

    def decorator(factory: Callable) -> Callable:
        if name in _FACTORIES:
            raise ValueError(f"model {name!r} is already registered")
        _FACTORIES[name] = factory
        return factory

    return decorator


def available() -> tuple[str, ...]:
    """Names of the registered models, sorted."""
    return tuple(sorted(_FACTORIES))


def get(name: str, **options):
    """Build the model ``name``; ``options`` go to its factory (e.g. ``recipe=2``).

    Raises:
        ValueError: an unknown name; an option the factory does not take (the message lists the
            ones it takes).
    """
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; available: {', '.join(available())}"
        ) from None
    taken = inspect.signature(factory).parameters
    unknown = sorted(set(options) - set(taken))
    if unknown and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in taken.values()):
        raise ValueError(f"models.get({name!r}): the factory takes no option {unknown}; its options: "
                         f"{', '.join(taken) or 'none'}")
    return factory(**options)


def describe(name: str) -> str:
    """First line of the factory's docstring."""
    doc = get_factory(name).__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def get_factory(name: str) -> Callable:
    if name not in _FACTORIES:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(available())}")
    return _FACTORIES[name]
