"""A gRPC proxy in front of the emulator that refuses what a principal's roles do not grant, as IAM does.

The emulator enforces no IAM. A principal that holds ``roles/pubsub.subscriber`` on a subscription
and nothing else may Pull, Acknowledge and ModifyAckDeadline there (``pubsub.subscriptions.consume``)
but gets PERMISSION_DENIED from GetSubscription (``pubsub.subscriptions.get``, in
``roles/pubsub.viewer``). This proxy passes every call through to the emulator as raw bytes (no
message is decoded) and answers the refused methods itself with PERMISSION_DENIED and the
service's text, so the source meets the real emulator with the real service's refusals.

The emulator does not implement TestIamPermissions (UNIMPLEMENTED). Given ``granted``, the proxy
answers it as the service does: the asked permissions that are granted, for a subscription that
exists; none for one that does not (the service answers an empty set there, not NOT_FOUND).

    proxy = RefusingProxy("127.0.0.1:8085", refuse={"GetSubscription"}, granted=SUBSCRIBER)
    ... option("emulatorHost", proxy.host_port) ...
    proxy.calls["GetSubscription"]  # how often each method was asked for, refused or not
    proxy.close()

``refuse`` may change while the proxy runs, and ``code``/``details`` name another refusal: an
outage of one method (``RefusingProxy(host, refuse=set(), code=grpc.StatusCode.UNAVAILABLE)``, then
``proxy.refuse.add("Acknowledge")``) lets every other call through.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from concurrent import futures

import grpc

# What the real service answers a call its caller lacks the permission for (HTTP 403).
DENIED = "User not authorized to perform this action."
# The Pub/Sub permissions of roles/pubsub.subscriber that matter here ("consume messages from a
# subscription and attach subscriptions to a topic": Google's "Pub/Sub roles and permissions").
SUBSCRIBER = frozenset({"pubsub.subscriptions.consume", "pubsub.topics.attachSubscription"})
# The methods of google.pubsub.v1 that stream both ways; every other one is unary.
_STREAMING = {"StreamingPull"}
_GET_SUBSCRIPTION = "/google.pubsub.v1.Subscriber/GetSubscription"


class RefusingProxy:
    """Forward gRPC calls to ``backend``; answer the methods named in ``refuse`` with ``code`` (PERMISSION_DENIED)."""

    def __init__(
        self,
        backend: str,
        refuse: Iterable[str],
        granted: Iterable[str] | None = None,
        *,
        code: grpc.StatusCode = grpc.StatusCode.PERMISSION_DENIED,
        details: str = DENIED,
    ) -> None:
        self.refuse = set(refuse)
        self.code, self.details = code, details
        self.granted = None if granted is None else frozenset(granted)
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._channel = grpc.insecure_channel(backend)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="iam-proxy"))
        self._server.add_generic_rpc_handlers((_Handler(self),))
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.host_port = f"127.0.0.1:{port}"

    def count(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def close(self) -> None:
        self._server.stop(grace=None)
        self._channel.close()

    def test_permissions(self, request: bytes, context) -> bytes:
        """TestIamPermissions as the service answers it, for ``granted`` on existing subscriptions."""
        from google.iam.v1 import iam_policy_pb2
        from google.pubsub_v1.types import pubsub

        asked = iam_policy_pb2.TestIamPermissionsRequest.FromString(request)
        get = self._channel.unary_unary(
            _GET_SUBSCRIPTION, request_serializer=lambda m: m.SerializeToString(), response_deserializer=None
        )
        try:
            get(pubsub.GetSubscriptionRequest.pb()(subscription=asked.resource), timeout=5)
            held = [p for p in asked.permissions if p in (self.granted or ())]
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                context.abort(exc.code(), exc.details() or "")
            held = []
        return iam_policy_pb2.TestIamPermissionsResponse(permissions=held).SerializeToString()


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, proxy: RefusingProxy) -> None:
        self._proxy = proxy

    def service(self, handler_call_details):
        method = handler_call_details.method  # e.g. "/google.pubsub.v1.Subscriber/GetSubscription"
        name = method.rsplit("/", 1)[-1]
        proxy = self._proxy

        if name in _STREAMING:

            def stream(requests, context):
                proxy.count(name)
                if name in proxy.refuse:
                    context.abort(proxy.code, proxy.details)
                try:
                    yield from proxy._channel.stream_stream(method)(requests)
                except grpc.RpcError as exc:
                    context.set_trailing_metadata(exc.trailing_metadata() or ())
                    context.abort(exc.code(), exc.details() or "")

            return grpc.stream_stream_rpc_method_handler(stream)

        def unary(request: bytes, context):
            proxy.count(name)
            if name in proxy.refuse:
                context.abort(proxy.code, proxy.details)
            if name == "TestIamPermissions" and proxy.granted is not None:
                return proxy.test_permissions(request, context)
            try:
                return proxy._channel.unary_unary(method)(request, timeout=context.time_remaining())
            except grpc.RpcError as exc:
                # Per-id answers of exactly-once acknowledgements travel in the trailing metadata.
                context.set_trailing_metadata(exc.trailing_metadata() or ())
                context.abort(exc.code(), exc.details() or "")

        return grpc.unary_unary_rpc_method_handler(unary)
