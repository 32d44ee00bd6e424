"""One connection per ingress replica and engine replica that carries every stream's deltas between them.

Serve's per-request stream (gRPC between deployments) costs a message of Serve's and gRPC's machinery in both
processes for every message of every stream: ~0.05 ms of CPU per token in each at 64 streams (docs/streaming.md).
Here the engine replica still gets each request through Serve's handle, which keeps what Serve gives per request
(its replica choice and ``max_ongoing_requests``, cancellation when the client goes, draining on downscale, the
``ongoing_requests`` signal, errors), but that call only says where its deltas go and then waits for the engine's
stream to end. The deltas go over the channel: the engine replica gathers what every stream of one ingress has
ready in an event-loop turn and writes it as one frame; the ingress hands each delta to its request's inbox.

The life of a channel:

* The ingress names its channel (:attr:`ChannelReceiver.id`) and a key per request in every call
  (``generate(request, reply_to=(channel id, key))``).
* An engine replica without a connection from that channel answers over Serve as before, its first item a
  :class:`ChannelOffer` (its address and a secret); the ingress connects in the background and sends a hello
  with the secret and its channel id.
* From then on that replica answers the channel's requests with :data:`ON_CHANNEL` first and their deltas
  on the channel; Serve's call ends when the engine's stream has ended, or raises the engine's error.
* A connection that drops fails the streams on it; the next request gets a new offer.

Modules: ``wire`` (frames, the hello and the two markers), ``sender`` (the engine replica's side), ``receiver``
(the ingress's side) and ``handle`` (Serve's handle wrapped so that the pipeline sees one stream of deltas).
"""

from serve_app.delta_channel.handle import ChannelHandle, ChannelStream
from serve_app.delta_channel.receiver import ChannelReceiver, Inbox
from serve_app.delta_channel.sender import ChannelServer
from serve_app.delta_channel.wire import ON_CHANNEL, ChannelOffer, OnChannel

__all__ = [
    "ON_CHANNEL",
    "ChannelHandle",
    "ChannelOffer",
    "ChannelReceiver",
    "ChannelServer",
    "ChannelStream",
    "Inbox",
    "OnChannel",
]
