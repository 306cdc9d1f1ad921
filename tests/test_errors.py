"""flowcast.Error is the root of every public exception, and each keeps its builtin base."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import flowcast
from flowcast.errors import ClosedError, Error

#: The builtin base each public exception had before the root existed: code
#: that catches ``ValueError`` or ``OSError`` must still catch them.
BUILTIN_BASES = {
    "flowcast.behaving.registry.BehaviourError": Exception,
    "flowcast.cast.cacheerrors.CacheCorrupt": Exception,
    "flowcast.cast.cacheerrors.CacheError": Exception,
    "flowcast.cast.cacheerrors.CacheFull": Exception,
    "flowcast.cast.cacheerrors.CacheLost": Exception,
    "flowcast.cast.config.CastConfigError": ValueError,
    "flowcast.cast.contacts.ContactsCorrupt": Exception,
    "flowcast.cast.e2e.ContactError": ValueError,
    "flowcast.cast.identity.IdentityError": ValueError,
    "flowcast.cast.inbox.InboxCorrupt": Exception,
    "flowcast.cast.names.CastNameError": ValueError,
    "flowcast.cast.sealing.SealError": ValueError,
    "flowcast.causal.keys.KeyFileError": ValueError,
    "flowcast.causal.ledger.LedgerCorrupt": Exception,
    "flowcast.causal.message.CausalError": ValueError,
    "flowcast.export.layout.ExportNameError": ValueError,
    "flowcast.export.reader.CorruptSegmentError": ValueError,
    "flowcast.export.schema.SchemaVersionError": ValueError,
    "flowcast.export.segments.WriterBusyError": OSError,
    "flowcast.export.sparkenv.JavaMissing": RuntimeError,
    "flowcast.flow.buildacts.BehaviourFailure": RuntimeError,
    "flowcast.flow.errors.FlowError": Exception,
    "flowcast.flow.errors.FlowErrors": Exception,
    "flowcast.house.layoutspec.LayoutError": Exception,
    "flowcast.house.runlock.AlreadyRunning": Exception,
    "flowcast.house.status.StatusError": Exception,
    "flowcast.routing.parcel.ParcelError": ValueError,
    "flowcast.routing.handlers.Refused": Exception,
    "flowcast.routing.policy.PolicyError": ValueError,
    "flowcast.routing.route.RouteError": ValueError,
    "flowcast.runtime.callback.CallbackError": RuntimeError,
    "flowcast.runtime.scheduler.MicroThreadError": RuntimeError,
    "flowcast.store.store.ShareNameError": ValueError,
    "flowcast.transport.keeprecord.KeepError": ValueError,
    "flowcast.transport.outgoing.OutgoingStateError": RuntimeError,
    "flowcast.transport.ports.uxd.SocketInUse": FileExistsError,
    "flowcast.transport.wire.WireError": ValueError,
}

#: A signal, not an error: a BaseException so that no ``except Exception``
#: (nor ``except flowcast.Error``) swallows a stop during start-up.
NOT_ERRORS = {"flowcast.house.estate.StartInterrupted"}



def _exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in a flowcast module, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(flowcast.__path__, "flowcast."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


EXCEPTIONS = _exceptions()
PUBLIC = {name: cls for name, cls in EXCEPTIONS.items() if not cls.__name__.startswith("_") and name not in NOT_ERRORS}


def test_the_root_is_exported_at_the_top():
    assert flowcast.Error is Error and flowcast.ClosedError is ClosedError
    assert issubclass(ClosedError, Error) and not issubclass(ClosedError, ValueError)


def test_every_public_exception_is_known_here():
    # A new exception class must be added above, with its builtin base.
    assert set(PUBLIC) - {"flowcast.errors.Error", "flowcast.errors.ClosedError", "flowcast.errors.DamagedFile"} == set(BUILTIN_BASES)


@pytest.mark.parametrize("name", sorted(BUILTIN_BASES))
def test_public_exception_has_the_root_and_keeps_its_builtin_base(name):
    cls = PUBLIC[name]
    assert issubclass(cls, Error), f"{name} does not derive from flowcast.Error"
    assert issubclass(cls, BUILTIN_BASES[name]), f"{name} lost its builtin base"


def test_start_interrupted_stays_outside_except_exception():
    cls = EXCEPTIONS["flowcast.house.estate.StartInterrupted"]
    assert not issubclass(cls, Exception)


def test_private_exceptions_do_not_share_a_name():
    private = [name.rsplit(".", 1)[1] for name, cls in EXCEPTIONS.items() if cls.__name__.startswith("_")]
    assert len(private) == len(set(private)), sorted(private)


def test_one_did_you_mean_for_every_layer() -> None:
    # The behaviour registry (below the flow layer) had its own copy of the
    # difflib call; flows, layouts and the CLI re-export the root's.
    import flowcast.errors
    import flowcast.flow.errors
    from flowcast.behaving import registry

    assert flowcast.flow.errors.did_you_mean is flowcast.errors.did_you_mean
    assert registry.did_you_mean is flowcast.errors.did_you_mean
    assert flowcast.errors.did_you_mean("depht", ["depth", "speed"]) == "did you mean 'depth'?"
    assert flowcast.errors.did_you_mean("zzz", ["depth"]) == ""
