"""The one message schema of disthook, and its codec: every process speaks only this.

A message is a ZeroMQ multipart::

    frame 0      msgpack map {"v": protocol version, "t": message type,
                              "r": request id, "c": context id or None,
                              "f": fields, "a": [[dtype, shape], ...]}
    frame 1..n   the raw bytes of each array, C order, in the order of "a"

Arrays may sit anywhere inside the fields (nested in lists and maps); in the header each one
is replaced by a msgpack extension value (code ``ARRAY_EXT``) holding its index into "a".
``encode`` writes "a" before "f", so that ``decode`` puts each array in its place as it reads
the fields (a header with "a" after "f" is read as well, its references resolved after).
Arrays are sent without copying (``zmq.Socket.send_multipart(frames, copy=False)`` over the
array's own buffer), so a sender must never change an array after handing it to ``encode``;
received arrays are views over the frames (``np.frombuffer``; writable with pyzmq's frames),
which a receiver may take as its own: nothing else reads a message's frames.

Decoding trusts nothing: the header size, frame count, array sizes and shape ranks are
capped (``Limits``), the version must match, the type must be one of ``SCHEMAS`` and its
fields must match the schema field by field. Anything else raises ``WireError`` with a
message that says what was expected and what came; callers answer it with an ``error``
message and carry on. No pickle and no eval anywhere: a message can only ever produce
None, bools, numbers, strings, bytes, lists, maps and numpy arrays of ``DTYPES``.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack
import numpy as np

from disthook import _dtype

__all__ = [
    "ARRAY_EXT",
    "DTYPES",
    "PIPE_MAGIC",
    "PIPE_MB",
    "PROTOCOL_NAME",
    "PROTOCOL_VERSION",
    "SCHEMAS",
    "WRITE_PARTS",
    "Limits",
    "Message",
    "WireError",
    "c_order",
    "checked",
    "decode",
    "decode_all",
    "decode_pipe",
    "encode",
    "encode_batch",
    "encode_batches",
    "encode_pipe",
    "pipe_fields",
    "pipe_run",
    "split_batch",
    "write_part",
]

# 2: typed sub-records (hook entries, optimizer calls, hook values); 3: forward and
# train_step carry optimizer steps as well as zero_grads (optimizer_calls), and an ok may
# come ahead of its hooks' answers; 4: a stage's modules may come pickled by value (code);
# 7: a chain model's writes travel its stages ("write"), which a worker of 6 does not know;
# 8: a tree-placed model's writes are numbered and committed ("commit"), its calls pinned;
# 9: a client's requests to one worker may come as one batch (a worker of 8 refuses it), and
# "pipe" records travel in a short form (a fixed struct header, see _encode_pipe); 10: a
# worker registers its local link and load_stage names the neighbours' (workers/links.py),
# fields a process of 9 refuses; 11: module_op "convert" (a placed module's dtype changed:
# to(dtype), double(), half()), which a worker of 10 refuses; 12: a hook's answer says it
# wrote to the model ("wrote": an attribute, a weight), and a part called inside a
# non-reentrant checkpoint runs checkpointed there ("checkpoint"): fields a worker of 11
# refuses; 14: a worker's heartbeat asks for an answer ("answer"), which the coordinator
# gives only then (or to refuse it); a forward or train_step names the program's default
# dtype ("default_dtype"); an attr_change says a list grew or a container changed in place
# ("grown", "in_place"), and a module_op may extend a list ("extend_attr"); a hook event
# names its tensors ("ids") and a forward passed on names its input ("names"); 15: arrays
# may be complex ("<c8", "<c16": pipe codes after the real ones); a train_step's schedule
# may hold "weight_batch" actions (zb-batched); a stage's "form" is asked (its modes,
# dtypes, buffers, requires_grad), and a forward passed on carries the revisions of the
# stages it passed ("forms"), which an attached client's answers and hook events carry
# too: all of which a process of 14 refuses; 16: hooks of kind "post_accumulate" (a
# deployed parameter's post-accumulate-grad hooks) and their events, module_op
# "client_modes" (the deployer's client-side modules' train/eval, which a stage's form
# carries as "client" to attached clients), a worker's links and heartbeats under
# identities of its own (random, a heartbeat only with the servers' key): which a process
# of 15 refuses or does not follow; 17: a train_step carries the stage's random stream
# ("rng"), which a worker of 16 refuses; 18: arrays of dtype "bfloat16" (the last pipe dtype
# code), which a process of 17 refuses; 19: load_stage says whether every authorized client
# may use the model ("public": it is published) or only its deployer's key, which a worker of
# 18 refuses; 20: a forward or train_step names the client's CPU autocast region's dtype
# ("autocast"), which a worker of 19 refuses; 21: a forward's stage says its output's graph
# missed the stage's input ("cut"), and a hook's value may be an inference-mode tensor
# ({"tensor", "inference"}), which a worker of 20 refuses; 22: a forward's answer and a
# chain's forward say which of the call's arguments its part changed in place ("changed",
# with the new values and how far their versions "moved"), and which tensors an autocast
# region cast ("casts", "cast"); a chain's last stage may answer structures ("items"); a hook
# event says which of its tensors are the call's own arguments ("arguments") and which are
# a backward hook's views ("views"), a chain's forward whether its input is an inference
# tensor ("inference") and its output such a view ("custom_view"); a backward through a call
# whose first backward kept its graph names the client's backward ("pass"): which a process
# of 21 refuses or does not follow
PROTOCOL_VERSION = 22
PROTOCOL_NAME = "disthook"  # what a hello names: the protocol spoken, whatever its version
# liveness, shared by every process (seconds, and counts of heartbeat intervals)
HEARTBEAT_S = 0.5  # a worker's beat to the coordinator; ZMTP pings on client connections
# a connection whose peer says nothing (hung, cut off) is dropped within LOST_AFTER_BEATS + 1
# beats of its last word; ZMTP pings, one every PING_EVERY_BEATS beats, find it (ping_options)
LOST_AFTER_BEATS = 3
PING_EVERY_BEATS = 2
SILENT_AFTER_BEATS = 10  # the coordinator lists a worker this long without beats as not alive
ARRAY_EXT = 1  # msgpack extension code of an array placeholder in the header

# The array dtypes that may cross the wire, by their little-endian numpy names, and bfloat16
# by its name (numpy's str of ml_dtypes' bfloat16, "<V2", names no dtype; a process without
# ml_dtypes has no bfloat16 tensors and refuses it).
_NUMPY_DTYPES = ("<f2", "<f4", "<f8", "|i1", "<i2", "<i4", "<i8", "|u1", "|b1", "<c8", "<c16")
_NP_DTYPES = {s: np.dtype(s) for s in _NUMPY_DTYPES}
_WIRE_NAMES = {}  # numpy's str of a dtype -> its name on the wire, where they differ
if _dtype.BF16 is not None:
    _NP_DTYPES["bfloat16"] = _dtype.BF16
    _WIRE_NAMES[_dtype.BF16.str] = "bfloat16"
DTYPES = frozenset(_NP_DTYPES)


def dtype_named(name: str) -> np.dtype:
    """The numpy dtype that a record's ``dtype`` field names: numpy's ``str`` of it (``"<f4"``;
    ``"<V2"`` is bfloat16's, which ``np.dtype`` reads as a plain void) or its wire name."""
    dt = _NP_DTYPES.get(_WIRE_NAMES.get(name, name))
    return np.dtype(name) if dt is None else dt


class WireError(ValueError):
    """A message that does not follow the protocol (malformed, too large, or off-schema).
    ``req``: the request id its header gave, where it had one (0 else), so that the refusal
    answers the request that is waiting for it."""

    req = 0


@dataclasses.dataclass(frozen=True)
class Limits:
    """Caps checked while decoding, before anything large is allocated."""

    max_header_bytes: int = 1 << 20          # 1 MiB of msgpack header
    max_frames: int = 4097                   # header + 4096 arrays
    max_array_bytes: int = 1 << 31           # 2 GiB per array
    max_total_bytes: int = 1 << 32           # 4 GiB per message
    max_rank: int = 8

    def frame_cap(self, arrays: bool = True) -> int:
        """The largest frame a receiver of these caps takes, set as ``ZMQ_MAXMSGSIZE`` on
        the sockets untrusted peers dial: ZeroMQ reads a frame's size first and closes the
        connection of a peer that sends a larger one before holding its bytes (the decoder
        would refuse it only once all of it had arrived). ``arrays=False``: a receiver
        whose messages carry no arrays (the coordinator), a header at most. The slack is
        CURVE's framing of an encrypted frame."""
        largest = max(self.max_header_bytes, self.max_array_bytes if arrays else 0)
        return largest + FRAME_SLACK


FRAME_SLACK = 1 << 12  # bytes a frame may have beyond its content (CURVE's box and command)
# the memory a header byte may take once decoded: an empty map, one byte, is a dict of 64
# bytes and 8 more for its place in a list (measured: 20 requests with headers of 1 MiB of
# them, queued on a worker behind a call waiting on its hook, held 1447 MiB there)
DECODED_PER_HEADER_BYTE = 72
DEFAULT_LIMITS = Limits()


@dataclasses.dataclass
class Message:
    """A decoded message: its type, request id, context id and validated fields."""

    type: str
    req: int = 0
    ctx: str | None = None
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)
    # what holding it costs: the bytes of its arrays, as received, and of its header as
    # decoded, at most (DECODED_PER_HEADER_BYTE a byte)
    nbytes: int = 0

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)


# ---- schemas --------------------------------------------------------------------------------
#
# A schema maps each field name to its kind; a trailing "?" makes the field optional (absent
# or None). Kinds:
#   str, int, float (an int is accepted), bool, bytes, array (a numpy array),
#   list (of anything valid), map (str keys, anything valid), any (anything valid).

#   the name of a record below (a map with its own schema), of an enum (a str from a set), of
#   a pair (a list of two kinds), hook_value (see _check_hook_value), and list[KIND].
_KINDS = frozenset({"str", "int", "float", "bool", "bytes", "array", "list", "map", "any"})

# the sub-messages that travel inside fields, each validated like a message's fields
RECORDS: dict[str, dict[str, str]] = {
    # one hook to register: on the module (or parameter, kind "tensor") at path; worker_hook
    # names a built-in worker hook (disthook.service.worker_hooks), else the stub calls the
    # client; tag says who registered it ("toolkit": disthook.hooks); waits: the forward or
    # backward always waits for this client hook's answer (never runs ahead of it)
    "hook_entry": {"hook": "int", "kind": "hook_kind", "path": "str", "options": "hook_options",
                   "worker_hook": "map?", "tag": "str?", "waits": "bool?"},
    "hook_options": {"prepend": "bool?", "with_kwargs": "bool?", "always_call": "bool?"},
    # one call of a stage's share of an optimizer (made on first use): its class (a name in
    # disthook.optim, or "module:Class"), constructor kwargs, the full names of its
    # parameters (in group order), its param groups when the client has them; "state" is
    # the state to load (action "load"); call: the client's number for a call that rides
    # with a forward or training step (it may come again if that failed: a stage runs a call
    # it ran before once only)
    "optimizer_call": {"id": "int", "class": "str", "kwargs": "map", "params": "list[str]",
                       "action": "optimizer_action", "set_to_none": "bool?", "state": "map?",
                       "groups": "list[optimizer_group]?", "call": "int?"},
    # the share of one of the client's param groups on a worker: its index there, its
    # parameters here, its hyperparameters now (sent with every step: schedulers move them)
    "optimizer_group": {"index": "int", "params": "list[str]", "hyper": "map"},
    # the loss of a training step: a module (its spec) or a function of nn.functional
    "loss_spec": {"module": "map?", "function": "str?"},
    # a tensor a client hook was given (by index) and changed in place: its new value, and
    # how far its version counter moved (absent: one); ``inference``: the client's copy is
    # an inference tensor, which took the change as one process's would (absent: False)
    "changed_arg": {"arg": "int", "value": "hook_value", "moved": "int?",
                    "inference": "bool?"},
    # a backward's hold: several calls of the model run their backwards in one backward of
    # the client, ``task`` its id; ``later``: the contexts of its calls still to run on this
    # worker after this one, in the first request of that backward to the worker (absent in
    # the next ones: the worker counts them off). A parameter that one of them uses too
    # keeps this call's gradient on its worker, and the last call that uses it adds them
    # before the parameter's hooks run (workers/held_grads)
    "backward_hold": {"task": "int", "later": "list[str]?"},
    # the plain attributes that a placed module's own code set on itself on its worker during
    # a call or its backward (``self.attention_map = attn``), which the client's module takes
    # (workers/attr_changes.py): the module's path in the model, the values that travel
    # (name -> hook_value), the type of each that cannot (name -> "a function"), the names
    # deleted. A call's answer (result["attrs"]) carries a list of them; a chain's stages
    # pass theirs on with the activation (forward) or gradient (backward) as "attrs"
    # in_place: names of "set" whose list or dict was changed in place (the receiver puts
    # the items into its own); grown: name -> [length before, the items a list grew by]
    "attr_change": {"path": "str", "set": "map?", "opaque": "map?", "deleted": "list[str]?",
                    "in_place": "list[str]?", "grown": "map?"},
    # a deployment published under a name (disthook.distributed.registry): its model id,
    # root class path, who deployed it (a key's name, or the client's socket identity in
    # hex without keys), when (unix seconds), whether others may write its weights, where
    # its stages are, how its tree is laid out, and the module tree's spec with every array
    # replaced by {"shape", "dtype"} (no weights), from which an attaching client makes a
    # twin; for a model whose modules hold code, no spec but the tree pickled by value
    # without its tensors' values (code), which an attaching client loads only if it trusts
    # the deployer's code (attach(name, trust_code=True))
    "published_model": {"name": "str", "model": "str", "class": "str", "owner": "str",
                        "created": "float", "writable": "bool",
                        "workers": "list[published_stage]", "layout": "published_layout",
                        "structure": "map?", "code": "bytes?"},
    "published_stage": {"stage": "int", "worker": "str", "address": "str"},
    # kind "chain": the root's children in contiguous stages (``stages`` their names);
    # "tree": parts placed over the tree (``placement`` as deployed, or chosen), ``split``
    # the paths that run on the client because their parts are on several workers,
    # ``client`` those kept whole there; "whole": a model without children on one worker
    "published_layout": {"kind": "layout_kind", "stages": "list[list[str]]",
                         "split": "list[str]", "client": "list[str]", "placement": "map?",
                         "chunks": "int", "schedule": "str"},
}
ENUMS: dict[str, frozenset] = {
    "hook_kind": frozenset({"forward_pre", "forward", "full_backward", "backward",
                            "full_backward_pre", "tensor", "post_accumulate"}),
    # what a hook event asks the client: run hook `hook` of a kind above; run the tensor
    # hooks a client hook put on a worker's tensor (leaf_hook); the vector-Jacobian product
    # of a tensor a client hook computed (vjp); take a retained gradient (retained)
    "event_kind": frozenset({"forward_pre", "forward", "full_backward", "backward",
                             "full_backward_pre", "tensor", "post_accumulate", "leaf_hook",
                             "vjp", "retained"}),
    "pipe_kind": frozenset({"act", "grad", "abort", "value"}),
    "optimizer_action": frozenset({"step", "zero_grad", "state", "load"}),
    "grad_op_kind": frozenset({"norm", "scale", "clamp", "set", "add"}),
    "module_op_kind": frozenset({"register_buffer", "set_attr", "del_attr", "train",
                                 "convert", "extend_attr", "client_modes"}),
    "schedule_kind": frozenset({"recv_act", "forward", "send_act", "recv_grad", "backward",
                                "send_grad", "weight", "weight_batch"}),
    "layout_kind": frozenset({"chain", "tree", "whole"}),  # of a published model
}
PAIRS: dict[str, tuple[str, str]] = {
    "schedule_action": ("schedule_kind", "int"),  # (kind, micro-batch)
}

SCHEMAS: dict[str, dict[str, str]] = {
    # the greeting: a client asks whoever listens at an address what it is, and a disthook
    # process answers with its own hello (name "disthook", its role, its protocol version).
    # Read at any protocol version, so that two versions can tell each other apart: its
    # fields never change
    "hello": {"name": "str", "protocol": "int", "role": "str?"},
    # replies shared by every request
    # ahead: the result of a pass that ran ahead of client hooks' answers, sent before the
    # worker took them (workers/speculation.py): it stands unless an answer of that round
    # changed something or failed, and then the answer of the pass run again follows
    "ok": {"result": "any?", "ahead": "str?"},
    "error": {"kind": "str", "message": "str", "worker": "str?", "path": "str?",
              "stage": "str?", "traceback": "str?"},
    # control plane: worker <-> coordinator
    # code: the worker takes models pickled by value from deploying clients (--allow-code)
    # link, link_host: the worker's socket for neighbour stages on its host, and what tells
    # its host (workers/links.py); neighbours that registered the same link_host may dial it
    "register": {"worker": "str", "address": "str", "pid": "int", "host": "str?",
                 "code": "bool?", "link": "str?", "link_host": "str?"},
    # answer: the worker asks the coordinator to answer this beat (it says nothing otherwise)
    # keepers (optional, with keys): key name -> the indices in stages of that key's
    # unpublished stages, "" -> those of published ones (the coordinator's status names a
    # stage to its key, or to every key when published, and to the cluster's keys)
    "heartbeat": {"worker": "str", "memory": "int?", "stages": "list?", "answer": "bool?",
                  "keepers": "map?"},
    "shutdown": {"reason": "str?"},
    # coordinator -> worker, at each registration: the registered workers' addresses and
    # local links, the only ones a client may have a worker dial (send_value, load_stage's
    # neighbours); also in the answer to "register", as "workers"
    "workers": {"addresses": "list[str]"},
    "status": {"model": "str?"},  # (a client's channel names its model in every message)
    # a worker's running requests, their waits and its queues (a stall's diagnosis)
    "waits": {},
    # placement: client -> worker. A worker may hold stages of several models; every
    # message below names the model (the deployment's id) it is for. aliases: the names
    # under which the client imports disthook's modules ({"torch": "disthook", ...}).
    # writable: clients other than the one that loads the stage may change its weights
    # (load_state_dict, in-place edits, optimizer steps); by default they may not.
    # public: the model is published, so any authorized client may use it; with keys, a
    # stage loaded without it answers only its deployer's key
    # The stage's modules come as data (spec: class paths, attributes, arrays), or pickled by
    # value (code: the pickle's bytes as a uint8 array; arrays: the tensors' values it refers
    # to, in order), which only a worker that takes code (--allow-code) accepts
    "load_stage": {"model": "str", "stage": "int", "spec": "map?", "code": "array?",
                   "arrays": "list[array]?", "prev": "str?", "next": "str?",
                   "aliases": "map?", "writable": "bool?", "public": "bool?",
                   # the neighbours' local links, where the coordinator knows them
                   "prev_link": "str?", "prev_link_host": "str?", "next_link": "str?",
                   "next_link_host": "str?"},
    "unload": {"model": "str"},
    # data plane: activations forward, gradients backward. The reply goes to the client
    # named by reply_to (hex of its socket identity) from the last (first) stage.
    # with stop (a module path), the stage holding that module answers the client with the
    # module's output and the later stages do no work (Deployment.run_until); with path,
    # the stage runs that submodule alone on call (the packed (args, kwargs), inputs empty)
    # and answers the client with its packed output (code running on the client calls it:
    # disthook.distributed.glue)
    # rng: the client's random stream (in training mode): each stage draws from it and
    # passes it on, and the answer carries it back (result["rng"]), so that dropout draws
    # what it draws in one process
    # optimizer_calls: the client's optimizer calls not sent yet (zero_grad(), and step()
    # once a step made the optimizer's shares), per stage a list of the "optimizer" maps of
    # "step", in the order they were made; each stage runs its own first
    # default_dtype: the client's default dtype ("float64", "float16"; absent: float32),
    # which the stages compute under (a factory in a forward makes what one process makes)
    # autocast: the dtype of the client's CPU autocast region ("bfloat16", "float16"; absent:
    # none), which the stages compute under (their linear layers as in one process)
    "forward": {"model": "str", "stage": "int", "inputs": "list", "grad_enabled": "bool",
                "reply_to": "str", "requires_grad": "list?", "mb": "int?", "stop": "str?",
                "optimizer_calls": "list[list[optimizer_call]]?", "path": "str?",
                "call": "hook_value?", "rng": "str?", "pins": "list?", "op": "str?",
                "params": "any?", "keep": "bool?", "as_of": "map?", "checkpoint": "map?",
                "within": "str?", "attrs": "list[attr_change]?", "names": "list[str]?",
                "default_dtype": "str?", "autocast": "str?", "forms": "map?", "cut": "bool?",
                "changed": "list?", "cast": "bool?", "inference": "list?",
                "custom_view": "list?", "unreached": "list[str]?", "saved_input": "bool?",
                "views": "list?"},
    # changed: the chain's input its first stage changed in place ({"arg", "value",
    # "moved"}: workers/given_args.py), passed on to the answer (result["changed"], as a
    # call's answer carries its arguments changed in place), which the client writes back
    # cast: a stage's autocast region kept a cast of a weight (autocast_mode.cached_leaves)
    # inference: for each of inputs, whether the client's tensor was made in inference_mode
    # (sent only where one was; a call's argument says so in "call" as {"tensor",
    # "inference"}): the stage's copy is one too (new since 21: a worker of 21 refuses it)
    # custom_view: in a forward passed on, [output_nr, name] where the previous stage's output
    # is a custom Function's view (a full backward hook's wrapping): the stage's input stands
    # for it and refuses an in-place change as one process does (new since 21, as above)
    # views: in a call of a part ("call"), for each of its tensors in the order packed,
    # [output_nr, name] where the client's tensor is a custom Function's view (a placed
    # call's output wrapped by a full backward hook), else None (sent only where one is):
    # the worker's copy refuses an in-place change as one process does (added in 22,
    # absent: none)
    # cut: the output's graph at an earlier stage missed that stage's input (a forward
    # pre-hook gave the module a detached tensor); the answer carries it (result["cut"])
    # unreached: the names of the earlier stages' parameters that their outputs' graphs miss
    # (a forward hook replaced a layer's output by one made under no_grad), each stage adding
    # its own; the answer carries them (result["unreached"], as a part's call's answer does
    # its part's): the client's node has no edge to them (added in 22, absent: none). A part's
    # call answers "saved_args" too: the numbers of its arguments its graph saved for
    # backward, and a kept output's record says "saved": "later" where a later op of the
    # call saved it (True: the node that made it), for the client's node to check their
    # versions (added in 22, absent: none); a chain's forward and answer "saved_input": stage
    # 0's graph saved the program's input, for the same check (added in 22, absent: False)
    # a chain's answer "name": the worker's name of its output where its events sent that
    # tensor to a client hook ("ids"), whose tensor for it the call returns here, one object
    # as in one process (given_tensors.become_output; new since 22, absent: none; a client
    # of 22 ignores it); a part's call answers "names" for its outputs the same way (None
    # for each not sent; absent where none was)
    # forms: the revisions of the stages a forward passed (workers/form.py), to answer an
    # attached client with; the ok answers of its forwards and backwards carry them too
    # within: the context of the client's call whose hook, running now, makes this call (a
    # logit lens decoding inside a block's hook): it runs at once, not behind that call
    # taps: keys of tensors client forward hooks were given, whose gradients the client
    # wants (autograd.grad with respect to them); each stage adds those it holds to tapped
    # (key -> gradient) and the answer carries them all (result["tapped"]). accumulate
    # False: an autograd.grad, which leaves every .grad as it is (default: a backward).
    # inputs False: the inputs' gradients are not wanted (an autograd.grad to taps only):
    # the stage holding the taps stops there and keeps its graph for a later backward.
    # start: the key of a tap: the backward starts from that tensor (grads: its gradient)
    # instead of the stage's outputs, and goes on to the earlier stages as usual
    "backward": {"model": "str", "stage": "int", "grads": "list", "retain_graph": "bool",
                 "reply_to": "str", "mb": "int?", "taps": "list[str]?", "tapped": "map?",
                 "accumulate": "bool?", "start": "str?", "inputs": "bool?",
                 "keep_grads": "str?", "create_graph": "bool?", "hold": "backward_hold?",
                 "attrs": "list[attr_change]?", "within": "str?", "pass": "int?"},
    # create_graph: the input gradients keep their graph (kept as a context under
    # keep_grads, whose backward is a double backward's second pass). pass: the client's
    # backward this request is part of, sent for a call whose first backward kept its
    # graph and for that graph's backward (workers/twice_split.py)
    # values kept on a worker (disthook.distributed.remote_values): a call's outputs, with
    # keep, stay on the worker that computed them under "<ctx>.<i>", and a backward's input
    # gradients, with keep_grads, under "<keep_grads>.<i>"; the answer describes them
    # ({"kept": id, "shape", "dtype", ...}). A call or backward names one with {"ref": id,
    # "requires_grad": bool} (in grads: {"ref": id}): the worker's own, or with
    # "from_peer": true one a peer sends it (it waits for it). send_value: push these values to the worker at address to (a "pipe" of kind
    # "value", step "<client>/<id>"), in request order; fetch: their arrays to the client;
    # drop_values: the client no longer holds them
    "send_value": {"model": "str", "values": "list[str]", "to": "str"},
    "fetch": {"model": "str", "values": "list[str]"},
    "drop_values": {"model": "str", "values": "list[str]"},
    # reply_to: the client whose contexts they are, when a neighbour stage carries it on
    "release": {"model": "str", "contexts": "list[str]", "reply_to": "str?"},
    # a client's call waits on an earlier stage: a write here keeps its weights for it
    "pin": {"model": "str", "calls": "list"},
    # a write of a chain model's weights that travels the pipeline from its first stage, as
    # a forward does (workers/versions.py): parts, one list per stage, each entry {"type":
    # one of WRITE_PARTS, "fields": that message's fields but model}; pins: the calls of
    # others it passed on earlier stages (from a neighbour stage only)
    "write": {"model": "str", "stage": "int", "parts": "any", "reply_to": "str?",
              "pins": "list?"},
    # hooks: a stub fired on a worker asks the client to run the callable with args; diff:
    # the client's copies of the tensors require grad where the worker's do (a forward hook
    # with grad enabled). The answer: the hook's result (None: keep the value), and the
    # arguments the hook put tensor hooks on (watch) or asked to retain_grad (retain), by
    # index, under key (the worker names them to the client with "key#index" later), and
    # the arguments it changed in place (changed), which the worker changes the same way,
    # and those whose gradients a later backward may ask for (taps, also under key).
    # spec: the forward's round of running ahead (workers/speculation.py): once the client
    # answered one event of a round with a change (a result, a tensor changed in place) or
    # an error, it answers the round's later events stale, without running their hooks
    # attrs: what the modules of the pass set on themselves so far (workers/attr_changes.py)
    # forms: the stage's revision (workers/form.py), for an attached client's hooks
    # ids: a name for each tensor of args, in order ("<tensor>@<version>"), the same in every
    # event of the job that sends that tensor: the client gives it one object in them all
    # arguments: for each tensor of args, the number of the call's argument it is, unchanged,
    # or None (sent only where one is): the client gives its hooks the program's own tensor
    # there; views: for each, [output_nr, name] of a custom Function's view output (a full
    # backward hook's wrapping) or None, which the client's tensor refuses to change in
    # place as one process does (both new since 21: a client of 21 refuses the fields; the
    # version is bumped at merge)
    "hook_event": {"hook": "int", "kind": "event_kind", "path": "str",
                   "args": "list[hook_value]", "diff": "bool?", "spec": "str?",
                   "attrs": "list[attr_change]?", "ids": "list[str]?", "forms": "map?",
                   "arguments": "list?", "views": "list?"},
    "hook_reply": {"hook": "int", "result": "hook_value?", "watch": "list[int]?",
                   "retain": "list[int]?", "key": "str?", "changed": "list[changed_arg]?",
                   "taps": "list[int]?", "stale": "bool?", "wrote": "bool?"},
    # a warning raised on a worker, issued again by the client
    "warning": {"category": "str", "message": "str", "worker": "str?"},
    # hooks to register on one worker, all or none
    "add_hooks": {"model": "str", "hooks": "list[hook_entry]", "reply_to": "str"},
    "remove_hooks": {"model": "str", "hooks": "list[int]"},  # hook ids
    "list_hooks": {"model": "str"},
    # worker hooks' capture buffers (shared by every model on the worker; a client names
    # its model when it asks over that model's connection), emptied unless clear is False
    "captured": {"name": "str", "clear": "bool?", "model": "str?"},
    # pipelined training steps: the client gives each stage its schedule; micro-batch
    # activations and gradients (or an abort) go stage to stage as "pipe" messages
    # (optimizer_calls: this stage's optimizer calls not sent yet, run before the schedule;
    # rng: the stream the stage draws from, made from the client's, handed back as "rng")
    "train_step": {"model": "str", "step": "str", "schedule": "list[schedule_action]",
                   "reply_to": "str", "inputs": "list?", "targets": "list?",
                   "loss": "loss_spec?", "scales": "list?",
                   "optimizer_calls": "list[optimizer_call]?", "default_dtype": "str?",
                   "autocast": "str?", "rng": "str?"},
    "pipe": {"model": "str", "step": "str", "kind": "pipe_kind", "mb": "int", "data": "array?",
             "reason": "str?"},
    # parameters, buffers and optimizer shards
    "get_state": {"model": "str", "names": "list?"},
    # what a stage is beyond its weights' values: its revision, modes, dtypes, shapes,
    # requires_grad and buffers (workers/form.py), for an attached client's copy
    "form": {"model": "str"},
    "train": {"model": "str", "mode": "bool"},
    # seq: a tree-placed model's write, numbered by its writer; commit: the writer's writes up
    # to seq are on every worker they went to (workers/versions.py)
    "set_state": {"model": "str", "state": "map", "seq": "int?"},
    "param_op": {"model": "str", "name": "str", "op": "str", "args": "any",
                 "kwargs": "any", "seq": "int?"},
    "commit": {"model": "str", "seq": "int"},
    # a change to the module at path that one process allows: a buffer registered (value: a
    # packed tensor or None), a plain attribute set (value: packed) or deleted, the part's
    # mode set (train: value is the mode, a bool; name is "training"), its tensors' dtypes
    # changed (convert: value maps names under the module to dtype names; name is ""), a
    # list attribute grown at its end (extend_attr: value is [its length before, the items])
    "module_op": {"model": "str", "path": "str", "op": "module_op_kind", "name": "str",
                  "value": "any?", "persistent": "bool?"},
    "step": {"model": "str", "optimizer": "optimizer_call?", "zero_grad": "bool?",
             "seq": "int?"},
    # gradients of named parameters, measured or changed where they live: "norm" (each
    # one's norm of order value), "scale" (times value), "clamp" (into [-value, value]),
    # "set" (to grads: an array or None per name)
    "grad_op": {"model": "str", "names": "list[str]", "op": "grad_op_kind", "value": "float?",
                "grads": "list?"},
    # the shared-model registry: client -> coordinator. publish: a deployment under its name
    # (refused while that name's deployment is live: its owner connected, its workers
    # alive); unpublish: by its deployer, on close (a deployer whose connection closes is
    # unpublished too). models: every published model, with its attached clients. lookup:
    # one record, to attach from. attach/detach: a client (key name, or socket identity in
    # hex) says it uses the model / stopped; the coordinator forgets it when its connection
    # closes as well
    "publish": {"record": "published_model"},
    "unpublish": {"name": "str", "model": "str"},
    "models": {},
    "lookup": {"name": "str"},
    "attach": {"name": "str", "model": "str", "client": "str"},
    "detach": {"name": "str", "model": "str", "client": "str"},
}



def _known_kind(kind: str) -> bool:
    if kind.startswith("list[") and kind.endswith("]"):
        return _known_kind(kind[5:-1])
    return (kind in _KINDS or kind in RECORDS or kind in ENUMS or kind in PAIRS
            or kind == "hook_value")


# a typo in a schema is a bug: fail at import
for _type, _schema in [*SCHEMAS.items(), *RECORDS.items(),
                       *((name, dict(enumerate(pair))) for name, pair in PAIRS.items())]:
    for _field, _kind in _schema.items():
        if not _known_kind(_kind.rstrip("?")):
            raise AssertionError(f"schema {_type!r} field {_field!r}: unknown kind {_kind!r}")


# ---- encoding -------------------------------------------------------------------------------

def encode(msg_type: str, fields: Mapping[str, Any] | None = None, *, req: int = 0,
           ctx: str | None = None) -> list:
    """Frames of one message: the header, then each array's buffer (not copied).

    Fields of kind list are built by disthook itself (activations, packed hook values) and
    go to msgpack as they are, arrays found by its ``default`` callback; fields of kind any
    or map may hold what a handler returned, and are walked first, so that a map key that
    is not a string fails here, on the sending side, with the key named."""
    if fields is None:
        fields = {}
    _validate_fields(msg_type, fields)
    if msg_type == "pipe" and not req and ctx is None:  # the hot record: its short form
        frames = _encode_pipe(fields)
        if frames is not None:
            return frames
    arrays: list[np.ndarray] = []
    walked = _WALKED[msg_type]
    if walked:
        body = None
        for name in walked:
            value = fields.get(name)
            if value is not None and type(value) not in _PLAIN:
                if body is None:
                    body = dict(fields)
                body[name] = _extract(value, arrays)
        if body is not None:
            fields = body

    def default(value):
        if isinstance(value, np.ndarray):
            arrays.append(_sendable(value, len(arrays)))
            return msgpack.ExtType(ARRAY_EXT, (len(arrays) - 1).to_bytes(4, "little"))
        if isinstance(value, np.generic):  # numpy scalars travel as plain numbers
            return value.item()
        raise WireError(f"cannot send a value of type {type(value).__name__}: {value!r:.80}")

    try:
        body_bytes = msgpack.packb(fields, use_bin_type=True, default=default)
        # the map of the other five keys, then "f" appended as its sixth entry: the array
        # table comes before the fields, so that the receiver has the arrays in hand when
        # it meets their references (msgpack fixmap 0x85 -> 0x86)
        head = msgpack.packb({"v": PROTOCOL_VERSION, "t": msg_type, "r": int(req), "c": ctx,
                              "a": [[_WIRE_NAMES.get(a.dtype.str, a.dtype.str), list(a.shape)]
                                    for a in arrays]},
                             use_bin_type=True)
    except WireError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"{msg_type!r} message cannot be packed: {exc}") from None
    return [b"\x86" + head[1:] + _F_KEY + body_bytes] + [
        memoryview(_dtype.as_buffer(a)).cast("B") if a.size else b"" for a in arrays]


_F_KEY = msgpack.packb("f")


def _extract(value, arrays: list[np.ndarray]):
    """A copy of ``value`` with each array moved to ``arrays`` and replaced by a placeholder."""
    t = type(value)
    if t in _PLAIN:
        return value
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise WireError(f"map keys must be strings, got {type(k).__name__} {k!r:.40}")
            out[k] = v if type(v) in _PLAIN else _extract(v, arrays)
        return out
    if t is list or t is tuple:
        # all plain, or a table of plain rows (a training step's timeline): sent as it is,
        # found so by loops in C rather than copied item by item
        kinds = set(map(type, value))
        if kinds <= _PLAIN or kinds <= _ROWS and set(
                map(type, itertools.chain.from_iterable(value))) <= _PLAIN:
            return value
        return [v if type(v) in _PLAIN else _extract(v, arrays) for v in value]
    if isinstance(value, np.ndarray):
        arrays.append(_sendable(value, len(arrays)))
        return msgpack.ExtType(ARRAY_EXT, (len(arrays) - 1).to_bytes(4, "little"))
    if isinstance(value, np.generic):  # numpy scalars travel as plain numbers
        return value.item()
    if isinstance(value, (dict, list, tuple, bool, int, float, str, bytes)):  # subclasses
        return _extract(_plain_copy(value), arrays)
    raise WireError(f"cannot send a value of type {type(value).__name__}: {value!r:.80}")


_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})
_ROWS = frozenset({list, tuple})


def _plain_copy(value):
    for base in (bool, int, float, str, bytes, dict, list):
        if isinstance(value, base):
            return base(value)
    return list(value)  # a tuple subclass


def c_order(arr: np.ndarray) -> np.ndarray:
    """``arr`` C-contiguous: itself when it is, else a copy. A 0-d array stays 0-d
    (``np.ascontiguousarray`` makes it 1-d: a scalar buffer would arrive as shape [1])."""
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _sendable(arr: np.ndarray, index: int) -> np.ndarray:
    dt = arr.dtype
    if dt.byteorder == ">":
        arr = arr.astype(dt.newbyteorder("<"))
    if _WIRE_NAMES.get(arr.dtype.str, arr.dtype.str) not in DTYPES:
        raise WireError(f"array {index}: dtype {arr.dtype} cannot be sent; "
                        f"expected one of {sorted(DTYPES)}")
    return c_order(arr)


# ---- batches: several messages in one multipart ----------------------------------------------
#
# A batch is one ZeroMQ multipart holding whole messages one after another, behind a first
# frame that says how many frames each has: BATCH_MAGIC, then a little-endian uint32 per
# message. It saves a send, a receive and a wake-up per message where many small ones go
# the same way at once (a client's answers to a burst of hook events, a burst of requests to
# one worker: ``disthook.distributed.send_together``).

BATCH_MAGIC = b"DHbatch1"  # never the start of a header (a msgpack map)


def encode_batch(messages: list[list]) -> list:
    """The frames of several encoded messages (each ``encode``'s) as one batch."""
    sizes = [len(frames) for frames in messages]
    return [BATCH_MAGIC + struct.pack(f"<{len(sizes)}I", *sizes),
            *itertools.chain.from_iterable(messages)]


def encode_batches(messages: list[list], *, limits: Limits = DEFAULT_LIMITS) -> list[list]:
    """The multiparts that carry ``messages`` (each ``encode``'s) in order: one message as
    it is, several as batches, each within the frame cap a receiver checks (a message that
    passes it alone goes alone)."""
    out: list[list] = []
    run: list[list] = []
    frames = 0
    for msg in messages:
        if run and frames + len(msg) > limits.max_frames - 1:  # (the table takes a frame)
            out.append(run[0] if len(run) == 1 else encode_batch(run))
            run, frames = [], 0
        run.append(msg)
        frames += len(msg)
    if run:
        out.append(run[0] if len(run) == 1 else encode_batch(run))
    return out


def split_batch(frames: Sequence, *, limits: Limits = DEFAULT_LIMITS
                ) -> tuple[bytes, list[Sequence] | None]:
    """The first frame's bytes, and the frames of each message of a batch (None: ``frames``
    are one message). ``WireError`` if the batch's table is off; its messages are not
    decoded here (a receiver may take each on its own: one that is off fails alone)."""
    if not frames:
        raise WireError("empty message: expected a header frame")
    head = _header(frames[0], limits)
    if not head.startswith(BATCH_MAGIC):
        return head, None
    table = head[len(BATCH_MAGIC):]
    if len(table) % 4 or not table:
        raise WireError(f"batch table of {len(table)} bytes: expected 4 per message")
    sizes = struct.unpack(f"<{len(table) // 4}I", table)
    if len(frames) - 1 > limits.max_frames or sum(sizes) != len(frames) - 1 or 0 in sizes:
        raise WireError(f"batch of {len(frames) - 1} frames does not hold messages of "
                        f"{list(sizes)[:8]} frames")
    parts, start = [], 1
    for size in sizes:
        parts.append(frames[start:start + size])
        start += size
    return head, parts


def decode_all(frames: Sequence, *, limits: Limits = DEFAULT_LIMITS) -> list[Message]:
    """The messages of one multipart: the message itself, or those of a batch. ``WireError``
    if anything is off, in any of them (then none is taken). A worker and a client take a
    batch's messages one by one instead (``split_batch``), so that one that is off fails
    alone."""
    head, parts = split_batch(frames, limits=limits)
    if parts is None:
        return [decode(frames, limits=limits, _head=head)]
    return [decode(part, limits=limits) for part in parts]


# ---- decoding -------------------------------------------------------------------------------

def decode(frames: Sequence, *, limits: Limits = DEFAULT_LIMITS, _head: bytes | None = None
           ) -> Message:
    """Validate and decode the frames of one message; raise ``WireError`` if anything is off
    (and nothing else: a slip of the codec on strange input is a WireError too, so that no
    peer can stop a process's loop). ``_head``: the header frame's bytes, when the caller
    has them (``decode_all``)."""
    try:
        return _decode(frames, limits, _head)
    except WireError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise WireError(f"malformed message: {type(exc).__name__}: {exc}") from None


def _header(frame, limits: Limits) -> bytes:
    """The bytes of a header frame, its size checked first. A ``zmq.Frame`` gives them
    copied (a header is small; its ``.buffer`` costs several times more), anything else
    bytes-like as its buffer's bytes."""
    if _is_frame(frame):
        size = len(frame)
        if size > limits.max_header_bytes:
            raise WireError(f"header of {size} bytes exceeds {limits.max_header_bytes}")
        return frame.bytes
    buf = _buffer(frame)
    if len(buf) > limits.max_header_bytes:
        raise WireError(f"header of {len(buf)} bytes exceeds {limits.max_header_bytes}")
    return buf.tobytes()


def _decode(frames: Sequence, limits: Limits, head: bytes | None = None) -> Message:
    if not frames:
        raise WireError("empty message: expected a header frame")
    if len(frames) > limits.max_frames:
        raise WireError(f"too many frames: {len(frames)} > {limits.max_frames}")
    if head is None:
        head = _header(frames[0], limits)
    if head[:_PIPE_MAGIC_LEN] == PIPE_MAGIC:
        return _decode_pipe(head, frames, limits)
    # The header's entries are read one by one. When the array table comes before the
    # fields (as encode writes it), every reference in the fields is resolved to its array
    # as msgpack meets it; otherwise references become placeholders, resolved afterwards.
    state = _DecodeState()

    try:
        if len(frames) == 1:  # no arrays: the header in one go
            header = msgpack.unpackb(head, raw=False, strict_map_key=True,
                                     ext_hook=state.placeholder, timestamp=_AS_NUMBER)
        else:
            header = _read_header(head, frames, limits, state)
    except WireError:
        raise
    except msgpack.ExtraData as exc:
        raise WireError(f"header has {len(exc.extra)} trailing bytes") from None
    except Exception as exc:
        raise WireError(f"malformed header: {type(exc).__name__}: {exc}") from None
    if not isinstance(header, dict):
        raise WireError(f"header must be a map, got {type(header).__name__}")
    if len(header) != 6 or header.keys() != _HEADER_KEYS:
        missing = _HEADER_KEYS - header.keys()
        extra = header.keys() - _HEADER_KEYS
        raise WireError(f"header keys: missing {sorted(missing, key=str)}, unexpected "
                        f"{sorted(extra, key=str)}")
    try:
        return _decode_fields(header, frames, limits, state, len(head))
    except WireError as exc:  # the sender's request, where the header names it
        exc.req = header["r"] if type(header["r"]) is int else 0
        raise


def _decode_fields(header: dict, frames: Sequence, limits: Limits, state,
                   head_bytes: int) -> Message:
    """The message of a header of ``head_bytes`` whose keys are right: its fields checked."""
    if header["v"] != PROTOCOL_VERSION and header["t"] != "hello":
        raise WireError(f"protocol version {header['v']!r}, expected {PROTOCOL_VERSION}")
    msg_type, req, ctx, fields = header["t"], header["r"], header["c"], header["f"]
    if not isinstance(msg_type, str):
        raise WireError(f"message type must be a string, got {type(msg_type).__name__}")
    if type(req) is not int:
        raise WireError(f"request id must be an int, got {type(req).__name__}")
    if ctx is not None and not isinstance(ctx, str):
        raise WireError(f"context id must be a string or None, got {type(ctx).__name__}")
    if not isinstance(fields, dict):
        raise WireError(f"fields must be a map, got {type(fields).__name__}")
    arrays = state.arrays
    if arrays is None:  # the table came after the fields (or was not a list: say so)
        arrays = _arrays(header["a"], frames[1:], limits)
        if state.refs:
            fields = {k: _resolve(v, arrays, state.used) for k, v in fields.items()}
    if len(state.used) != len(arrays):
        raise WireError(f"{len(arrays) - len(state.used)} array frame(s) not referenced by the "
                        "header")
    if state.outside or len(state.used) != state.refs:  # say a reference in the table
        raise WireError("array reference outside the message fields")
    _validate_fields(msg_type, fields, convert=True)
    global _decoded
    _decoded += 1
    return Message(msg_type, req, ctx, fields, sum(a.nbytes for a in arrays)
                   + DECODED_PER_HEADER_BYTE * head_bytes)


def _read_header(head, frames: Sequence, limits: Limits, state) -> dict:
    """The header map read entry by entry (see decode), or the whole value if not a map."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, ext_hook=state.ext,
                                timestamp=_AS_NUMBER,
                                max_buffer_size=max(len(head), 1))
    unpacker.feed(head)
    try:
        entries = unpacker.read_map_header()
    except msgpack.UnpackValueError:
        raise
    except ValueError:  # not a map: the whole value, for the error message
        return msgpack.unpackb(head, raw=False, strict_map_key=True, ext_hook=state.ext,
                               timestamp=_AS_NUMBER)
    header = {}
    for _ in range(entries):
        key = unpacker.unpack()
        if type(key) is str and key in header:
            raise WireError(f"header key {key!r} appears twice")
        if key == "f":
            state.in_fields = True
            header[key] = unpacker.unpack()
            state.in_fields = False
        else:
            header[key] = value = unpacker.unpack()
            if key == "a" and type(value) is list and "f" not in header:
                try:
                    state.arrays = _arrays(value, frames[1:], limits)
                except WireError as exc:  # answers the request, as one of its fields would
                    exc.req = header["r"] if type(header.get("r")) is int else 0
                    raise
    if unpacker.tell() != len(head):
        raise WireError(f"header has {len(head) - unpacker.tell()} trailing bytes")
    return header


# msgpack's own extension -1 (a timestamp), which it reads without the ext hook: read as a
# number (seconds), so that a message still holds only plain values (not msgpack.Timestamp)
_AS_NUMBER = 1


class _DecodeState:
    __slots__ = ("arrays", "in_fields", "outside", "refs", "used")

    def __init__(self):
        self.arrays: list[np.ndarray] | None = None
        self.used: set[int] = set()
        self.refs = 0
        self.in_fields = False
        self.outside = False

    def placeholder(self, code: int, data: bytes) -> _Placeholder:
        """msgpack's ext hook when the references are resolved after the whole header."""
        if code != ARRAY_EXT or len(data) != 4:
            raise WireError(f"unknown msgpack extension {code} of {len(data)} bytes")
        self.refs += 1
        return _Placeholder(int.from_bytes(data, "little"))

    def ext(self, code: int, data: bytes):
        """msgpack's ext hook: an array reference becomes its array (or a placeholder while
        the table is not read yet); a reference outside the fields is noted."""
        if code != ARRAY_EXT or len(data) != 4:
            raise WireError(f"unknown msgpack extension {code} of {len(data)} bytes")
        index = int.from_bytes(data, "little")
        if not self.in_fields:
            self.outside = True
            return None
        self.refs += 1
        arrays = self.arrays
        if arrays is None:
            return _Placeholder(index)
        if index >= len(arrays):
            raise WireError(f"array reference {index} out of range "
                            f"(message has {len(arrays)} array(s))")
        if index in self.used:
            raise WireError(f"array {index} referenced twice")
        self.used.add(index)
        return arrays[index]


_decoded = 0  # valid messages this process decoded (disthook bench scaling counts them)


def decoded_count() -> int:
    """How many valid messages this process has decoded so far."""
    return _decoded


_HEADER_KEYS = frozenset({"v", "t", "r", "c", "f", "a"})


class _Placeholder:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _is_frame(frame) -> bool:
    """Whether ``frame`` is a ``zmq.Frame`` (this module never imports zmq). Asked of its
    class: a frame's ``bytes`` is a property that copies the whole frame."""
    return hasattr(type(frame), "bytes") and not isinstance(frame, (bytes, bytearray,
                                                                     memoryview))


def _buffer(frame) -> memoryview:
    buf = getattr(frame, "buffer", frame)  # zmq.Frame or bytes-like
    return memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(buf)


def _arrays(table, frames: Sequence, limits: Limits) -> list[np.ndarray]:
    if not isinstance(table, list):
        raise WireError(f"array table must be a list, got {type(table).__name__}")
    if len(table) != len(frames):
        raise WireError(f"header describes {len(table)} array(s) but {len(frames)} "
                        "array frame(s) came")
    arrays, total = [], 0
    max_rank = limits.max_rank
    for i, (entry, frame) in enumerate(zip(table, frames)):
        if not (type(entry) is list and len(entry) == 2):
            raise WireError(f"array {i}: descriptor must be [dtype, shape], got {entry!r:.80}")
        dtype, shape = entry
        dt = _NP_DTYPES.get(dtype) if type(dtype) is str else None
        if dt is None:
            raise WireError(f"array {i}: dtype {dtype!r} is not allowed; "
                            f"expected one of {sorted(DTYPES)}")
        if not (type(shape) is list and len(shape) <= max_rank
                and all(type(d) is int and d >= 0 for d in shape)):
            raise WireError(f"array {i}: shape must be a list of at most {max_rank} "
                            f"non-negative ints, got {shape!r:.80}")
        nbytes = dt.itemsize * math.prod(shape)
        if nbytes > limits.max_array_bytes:
            raise WireError(f"array {i}: {nbytes} bytes exceeds {limits.max_array_bytes}")
        total += nbytes
        if total > limits.max_total_bytes:
            raise WireError(f"arrays exceed {limits.max_total_bytes} bytes in all")
        # a zmq.Frame is a buffer itself (writable, its length in bytes): read as it is
        buf = frame if _is_frame(frame) else _buffer(frame)
        if len(buf) != nbytes:
            raise WireError(f"array {i}: frame has {len(buf)} bytes, dtype {dtype} and shape "
                            f"{tuple(shape)} need {nbytes}")
        if not nbytes:
            arr = np.empty(tuple(shape), dt)
        elif len(shape) == 1:
            arr = np.frombuffer(buf, dtype=dt)
        else:
            arr = np.frombuffer(buf, dtype=dt).reshape(shape)
        if dt.kind == "b" and nbytes and np.any(arr.view(np.uint8) > 1):
            raise WireError(f"array {i}: bool array holds bytes other than 0 and 1")
        arrays.append(arr)
    return arrays


def _resolve(value, arrays: list[np.ndarray], used: set[int]):
    """Replace array placeholders by the arrays, checking every reference."""
    t = type(value)
    if t is _Placeholder:
        if not 0 <= value.index < len(arrays):
            raise WireError(f"array reference {value.index} out of range "
                            f"(message has {len(arrays)} array(s))")
        if value.index in used:
            raise WireError(f"array {value.index} referenced twice")
        used.add(value.index)
        return arrays[value.index]
    if t is list:
        return [_resolve(v, arrays, used) if type(v) in _WALK else v for v in value]
    if t is dict:
        return {k: _resolve(v, arrays, used) if type(v) in _WALK else v
                for k, v in value.items()}
    return value


_WALK = (list, dict, _Placeholder)


# ---- the pipe record's short form ------------------------------------------------------------
#
# A stage sends two "pipe" messages per micro-batch (its activation on, its gradient back),
# so the general header (a msgpack map of a map) is replaced there by a fixed struct: no
# dict is packed or unpacked, no schema walked. Frame 0 is
#
#     PIPE_MAGIC, version u8, kind u8 (index into PIPE_KINDS), flags u8 (1: an array
#     follows, 2: a reason is given), dtype u8 (index into PIPE_DTYPES), rank u8, mb i64,
#     bytes of model u16, of step u16, of reason u32; then rank x u64 (the shape), and the
#     model, step and reason as UTF-8
#
# and frame 1, when flag 1 is set, the array's raw bytes (sent from its own buffer, received
# as a view of the frame as every array is). It decodes to the same Message as the general
# form; ``encode("pipe", ...)`` writes it whenever the fields fit (they always do when they
# pass the schema, but for a micro-batch number beyond 64 bits or a name over 64 KiB), and
# ``decode`` reads either form. The same checks apply: sizes capped before anything is
# allocated, the version, every code, the frame count, the UTF-8 of each name.

PIPE_MAGIC = b"DHpipe"  # never the start of a general header (a msgpack map)
_PIPE_MAGIC_LEN = len(PIPE_MAGIC)
PIPE_KINDS = tuple(sorted(ENUMS["pipe_kind"]))
# complex last (15); bfloat16 after them, where it is (16: its code moves none of theirs)
PIPE_DTYPES = tuple(sorted(_NUMPY_DTYPES, key=lambda d: (d[1] == "c", d))) + tuple(
    d for d in DTYPES if d not in _NUMPY_DTYPES)
_PIPE_KIND_CODE = {k: i for i, k in enumerate(PIPE_KINDS)}
_PIPE_DTYPE_CODE = {d: i for i, d in enumerate(PIPE_DTYPES)}
_PIPE_HEAD = struct.Struct("<6sBBBBBqHHI")
_PIPE_SHAPES = tuple(struct.Struct(f"<{rank}Q") for rank in range(33))
_UINT8 = np.dtype(np.uint8)
_PIPE_NP_DTYPES = tuple(_NP_DTYPES[d] for d in PIPE_DTYPES)  # (kept: their ids key the map below)
# a dtype's code by the identity of numpy's one object for it (what arrays carry)
_PIPE_DTYPE_BY_ID = {id(dt): i for i, dt in enumerate(_PIPE_NP_DTYPES)
                     if dt is np.dtype(dt.str) or dt is _dtype.BF16}
_PIPE_DATA, _PIPE_REASON = 1, 2
_INT64 = (-(1 << 63), (1 << 63) - 1)
# the header's bytes before the micro-batch number (mb, 8 bytes) and from after it: a stage
# sends and takes a run of records whose headers differ in mb alone (the model, the step,
# the kind, the array's dtype and shape as before), so each side keeps the last header of
# each kind it wrote or read whole, and a record whose header matches it but for mb is
# written or taken without the whole header's work (the same bytes: the same checks passed)
_MB_AT = _PIPE_HEAD.size - 16
_MB_END = _MB_AT + 8
PIPE_MB = struct.Struct("<q")
_pipe_sent: dict = {}  # kind -> (model, step, reason, dtype, shape, bytes before mb, after)
_pipe_read: dict = {}  # kind code -> (bytes before mb, after, limits, frames, (model, step,
# kind, reason), the array's dtype, shape and bytes: None without one)


def encode_pipe(model: str, step: str, kind: str, mb: int, data: np.ndarray | None = None,
                reason: str | None = None) -> list:
    """``encode("pipe", {...})`` of these fields without the map or the schema's walk: the
    short form when they fit it, else (a field off, or too large for it) what ``encode``
    gives or raises for them."""
    frames = _pipe_frames(model, step, kind, mb, data, reason)
    if frames is None:
        return encode("pipe", {"model": model, "step": step, "kind": kind, "mb": mb,
                               "data": data, "reason": reason})
    return frames


def _encode_pipe(fields: Mapping[str, Any]) -> list | None:
    """The frames of a (schema-checked) pipe record in its short form; None where its
    fields do not fit one (the general form carries them then)."""
    get = fields.get
    return _pipe_frames(get("model"), get("step"), get("kind"), get("mb"), get("data"),
                        get("reason"))


def pipe_run(model, step, kind, mb, data, reason=None) -> tuple | None:
    """``(kept, body)`` where this record's header is the one kept for ``kind`` (the last
    written whole) but for ``mb``: ``kept`` its bytes before and after mb (``kept[5]``,
    ``kept[6]``; the same tuple while the run lasts), ``body`` the array's bytes as a byte
    view; None where it is not (the whole header is written then)."""
    last = _pipe_sent.get(kind) if type(kind) is str else None
    if (last is not None and model is last[0] and step is last[1] and reason is last[2]
            and type(mb) is int and type(data) is np.ndarray and data.dtype is last[3]
            and data.shape == last[4] and _INT64[0] <= mb <= _INT64[1]):
        try:  # (C-contiguous: as the whole path takes it; a dtype of its own buffer)
            return last, memoryview(data).cast("B")
        except TypeError:
            return None
    return None


def _pipe_frames(model, step, kind, mb, data, reason) -> list | None:
    """The short form's frames; None where a field is not of the exact type it takes (the
    schema's check says what is off) or does not fit."""
    run = pipe_run(model, step, kind, mb, data, reason)
    if run is not None:
        last, body = run
        return [b"".join((last[5], PIPE_MB.pack(mb), last[6])), body]
    code = _PIPE_KIND_CODE.get(kind) if type(kind) is str else None
    if (code is None or type(mb) is not int or not _INT64[0] <= mb <= _INT64[1]
            or type(model) is not str or type(step) is not str
            or not (reason is None or type(reason) is str)
            or not (data is None or type(data) is np.ndarray)):
        return None
    given = (model, step)
    model, step = model.encode(), step.encode()
    why = b"" if reason is None else reason.encode()
    if len(model) > 0xFFFF or len(step) > 0xFFFF or len(why) > 0xFFFFFFFF:
        return None
    flags = 0 if reason is None else _PIPE_REASON
    if data is None:
        head = _PIPE_HEAD.pack(PIPE_MAGIC, PROTOCOL_VERSION, code, flags, 0, 0, mb,
                               len(model), len(step), len(why))
        return [b"".join((head, model, step, why))]
    dtype = _PIPE_DTYPE_BY_ID.get(id(data.dtype))  # (the common case: one look-up)
    try:  # C-contiguous, not empty, of a dtype as the short form names it: as it is
        body = None if dtype is None else memoryview(_dtype.as_buffer(data)).cast("B")
    except TypeError:
        body = None
    if body is None:  # (a copy where it must be: another byte order, a view, no bytes)
        data = _sendable(data, 0)
        dtype = _PIPE_DTYPE_CODE[_WIRE_NAMES.get(data.dtype.str, data.dtype.str)]
        body = memoryview(_dtype.as_buffer(data)).cast("B") if data.size else b""
    dims = data.shape  # (read once: each read of an array's attribute costs, cold)
    rank = len(dims)
    if rank > 255:
        return None
    head = _PIPE_HEAD.pack(PIPE_MAGIC, PROTOCOL_VERSION, code, flags | _PIPE_DATA, dtype,
                           rank, mb, len(model), len(step), len(why))
    shape = (_PIPE_SHAPES[rank] if rank < len(_PIPE_SHAPES) else struct.Struct(f"<{rank}Q"))
    head = b"".join((head, shape.pack(*dims), model, step, why))
    if data.dtype is _PIPE_NP_DTYPES[dtype] and data.dtype is not _dtype.BF16:  # (an array
        # of this dtype is its own buffer's bytes: the next one's body is a byte view of it)
        _pipe_sent[kind] = (*given, reason, data.dtype, dims, head[:_MB_AT], head[_MB_END:])
    return [head, body]


def decode_pipe(frames: Sequence, *, limits: Limits = DEFAULT_LIMITS) -> Message:
    """``decode(frames)`` of a pipe record in its short form (frame 0 bytes-like), without
    the general form's steps; ``WireError`` as ``decode`` raises it where anything is off,
    a record in another form included."""
    try:
        if not frames:
            raise WireError("empty message: expected a header frame")
        head = frames[0]
        if type(head) is not bytes:
            head = _header(head, limits)
        elif len(head) > limits.max_header_bytes:
            raise WireError(f"header of {len(head)} bytes exceeds {limits.max_header_bytes}")
        if head[:_PIPE_MAGIC_LEN] != PIPE_MAGIC:
            raise WireError("not a pipe record in its short form")
        return _decode_pipe(head, frames, limits)
    except WireError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise WireError(f"malformed message: {type(exc).__name__}: {exc}") from None


def _decode_pipe(head: bytes, frames: Sequence, limits: Limits) -> Message:
    """A pipe record in its short form (``head``: frame 0's bytes), checked as ``decode``
    checks the general form."""
    return Message("pipe", 0, None, pipe_fields(head, frames, limits))


def pipe_fields(head: bytes, frames: Sequence, limits: Limits) -> dict:
    """The fields of a pipe record in its short form, checked as ``decode`` checks them,
    without the message around them (a local link's receive path puts them in the mailbox
    as they are): ``head`` is frame 0's bytes, whose size within ``limits`` and magic the
    caller checked; ``WireError`` as ``decode_pipe`` raises it where anything else is off."""
    global _decoded
    fixed = _PIPE_HEAD.size
    if len(head) < fixed:
        raise WireError(f"pipe header of {len(head)} bytes: expected at least {fixed}")
    last = _pipe_read.get(head[7])  # (the kind's code)
    if (last is not None and head[_MB_END:] == last[1] and head[:_MB_AT] == last[0]
            and limits is last[2] and len(frames) == last[3]):
        # the header read last for this kind but for mb: it passed every check then
        data = None
        if last[5] is not None:
            frame = frames[1]
            if (type(frame) is np.ndarray and frame.dtype is _UINT8
                    and frame.nbytes == last[7]):
                data = np.ndarray(last[6], last[5], frame)
        if data is not None or last[5] is None:
            _decoded += 1
            model, step, kind, reason = last[4]
            return {"model": model, "step": step, "kind": kind,
                    "mb": PIPE_MB.unpack_from(head, _MB_AT)[0], "data": data, "reason": reason}
    try:  # (one function: each call costs where the path runs cold)
        _, version, code, flags, dtype, rank, mb, n_model, n_step, n_why = \
            _PIPE_HEAD.unpack_from(head)
        if version != PROTOCOL_VERSION:
            raise WireError(f"protocol version {version!r}, expected {PROTOCOL_VERSION}")
        if code >= len(PIPE_KINDS):
            raise WireError(f"'pipe' message: field 'kind' must be one of {list(PIPE_KINDS)}, "
                            f"got code {code}")
        if flags & ~(_PIPE_DATA | _PIPE_REASON):
            raise WireError(f"pipe header: unknown flags {flags:#x}")
        has_data = flags & _PIPE_DATA
        if not has_data and (dtype or rank):
            raise WireError("pipe header describes an array but says none follows")
        if rank > limits.max_rank:
            raise WireError(f"array 0: shape must be a list of at most {limits.max_rank} "
                            f"non-negative ints, got rank {rank}")
        if len(head) != fixed + 8 * rank + n_model + n_step + n_why:
            raise WireError(f"pipe header of {len(head)} bytes does not hold what it describes")
        expected = 2 if has_data else 1
        if len(frames) != expected:
            raise WireError(f"pipe message of {len(frames)} frames: its header says {expected}")
        at = fixed + 8 * rank
        try:
            model = head[at:at + n_model].decode()
            step = head[at + n_model:at + n_model + n_step].decode()
            reason = (head[at + n_model + n_step:].decode() if flags & _PIPE_REASON else None)
        except UnicodeDecodeError as exc:
            raise WireError(f"pipe header: a name is not UTF-8: {exc}") from None
        if not (flags & _PIPE_REASON) and n_why:
            raise WireError("pipe header: reason bytes without a reason")
        data, kept = None, None
        if has_data:
            if dtype >= len(PIPE_DTYPES):
                raise WireError(f"array 0: dtype code {dtype} is not allowed; expected one of "
                                f"{list(range(len(PIPE_DTYPES)))}")
            shape = (_PIPE_SHAPES[rank] if rank < len(_PIPE_SHAPES)
                     else struct.Struct(f"<{rank}Q")).unpack_from(head, fixed)
            dt, frame = _PIPE_NP_DTYPES[dtype], frames[1]
            size = frame.nbytes if type(frame) is np.ndarray else 0  # (read once)
            if (size and frame.dtype is _UINT8 and dt.kind != "b"  # a link's frame (a
                    # fresh buffer), whole: the array is a view of it
                    and size <= limits.max_array_bytes and size <= limits.max_total_bytes
                    and size == dt.itemsize * math.prod(shape)):
                data = np.ndarray(shape, dt, frame)  # (one call: a view and a reshape cost two)
                kept = (dt, shape, size)
            else:  # anything else, and whatever is off, as decode reads it
                if any(d > _INT64[1] for d in shape):
                    raise WireError(f"array 0: shape {list(shape)!r:.80} too large")
                data = _arrays([[PIPE_DTYPES[dtype], list(shape)]], frames[1:], limits)[0]
        _decoded += 1
        kind = PIPE_KINDS[code]
        if kept is not None or not has_data:  # (the names, never the array: it is the
            # receiver's, and a link's arena block is freed when it goes)
            _pipe_read[code] = (head[:_MB_AT], head[_MB_END:], limits, expected,
                                (model, step, kind, reason), *(kept or (None, None, None)))
        return {"model": model, "step": step, "kind": kind, "mb": mb, "data": data,
                "reason": reason}
    except WireError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise WireError(f"malformed message: {type(exc).__name__}: {exc}") from None


# ---- schema validation ------------------------------------------------------------------------

_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: type(v) is int,
    "float": lambda v: type(v) in (int, float),
    "bool": lambda v: type(v) is bool,
    "bytes": lambda v: isinstance(v, (bytes, bytearray, memoryview)),
    "array": lambda v: isinstance(v, np.ndarray),
    "list": lambda v: isinstance(v, (list, tuple)),
    "map": lambda v: isinstance(v, dict),
    "any": lambda v: True,
}
# fast paths of the checks: the exact types each kind accepts without calling its check
_EXACT = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
          "bytes": (bytes,), "array": (np.ndarray,), "list": (list, tuple), "map": (dict,),
          "any": ()}



class Record(dict):
    """A decoded sub-record (a RECORDS kind): a map whose fields are attributes too."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"record has no field {name!r}") from None


MAX_NESTING = 32  # levels of nested hook values


def _base_kind(kind: str) -> str:
    """The plain kind a structured kind's value must be first."""
    if kind.startswith("list[") or kind in PAIRS:
        return "list"
    if kind in RECORDS:
        return "map"
    if kind in ENUMS:
        return "str"
    if kind == "hook_value":
        return "any"
    return kind


def _type_name(value) -> str:
    return type(value).__name__


_CHECKERS: dict[str, Any] = {}


def _checker(kind: str):
    """A function (where, value, depth) -> value that validates ``value`` as ``kind`` (records
    come back as ``Record``), raising WireError that names ``where``; None for a plain kind
    whose type check says all."""
    if kind in _CHECKERS:
        return _CHECKERS[kind]
    if kind in _KINDS:
        checker = None
    elif kind.startswith("list["):
        checker = _list_checker(kind)
    elif kind in RECORDS:
        checker = _record_checker(kind)
    elif kind in ENUMS:
        allowed = ENUMS[kind]

        def checker(where, value, depth):
            if value not in allowed:
                raise WireError(f"{where} must be one of {sorted(allowed)}, got {value!r:.40}")
            return value
    elif kind in PAIRS:
        kinds = PAIRS[kind]
        parts = [(_base_kind(k), _checker(k)) for k in kinds]

        def checker(where, value, depth):
            if len(value) != 2:
                raise WireError(f"{where} must be a pair ({', '.join(kinds)}), got "
                                f"{len(value)} items")
            out = []
            for i, ((base, check), v) in enumerate(zip(parts, value)):
                out.append(_field_value(f"{where}[{i}]", kinds[i], base, check, v, depth))
            return out
    else:
        checker = _check_hook_value
    _CHECKERS[kind] = checker
    return checker


def _field_value(where: str, kind: str, base: str, check, value, depth: int):
    """``value`` checked as ``kind`` (its plain type ``base``, then ``check``)."""
    if not (base == "any" or type(value) in _EXACT[base] or _CHECKS[base](value)):
        raise WireError(f"{where} must be {kind}, got {_type_name(value)}")
    return value if check is None else check(where, value, depth + 1)


def checked(kind: str, value, where: str):
    """``value`` validated as ``kind`` (a record's name, ``list[...]`` of one...), for a
    record that travels inside an untyped field (an "ok" reply's result); ``WireError``
    naming ``where`` when it is not one."""
    return _field_value(where, kind, _base_kind(kind), _checker(kind), value, 0)


def _list_checker(kind: str):
    inner_kind = kind[5:-1]
    base, inner = _base_kind(inner_kind), _checker(inner_kind)
    all_fit = _all_fit(inner_kind)

    def check_list(where, value, depth):
        # a list whose items all pass the quick test is as the full check would give it
        # back; else the full check, item by item, which names the one that is off (a
        # schedule of 100 pairs: a few us instead of a path built for each of 300 values)
        if all_fit is not None and type(value) is list and all_fit(value):
            return value
        return [_field_value(f"{where}[{i}]", inner_kind, base, inner, v, depth)
                for i, v in enumerate(value)]
    return check_list


def _all_fit(kind: str):
    """A quick test that every item of a list passes ``kind``'s check unchanged, made of
    loops in C over the whole list (exact types only: a False sends the list through the
    full check, which decides), or None for a kind whose check builds a new value (a
    record) or walks nested values (a hook value)."""
    if kind in _KINDS:
        if kind == "any":
            return None
        exact = frozenset(_EXACT[kind])
        return lambda items: set(map(type, items)) <= exact
    if kind in ENUMS:
        allowed = ENUMS[kind]
        return lambda items: set(map(type, items)) <= _STR and set(items) <= allowed
    if kind in PAIRS:
        first, second = (_all_fit(k) for k in PAIRS[kind])
        if first is None or second is None:
            return None

        def pairs_fit(items):
            if set(map(type, items)) - _LIST or set(map(len, items)) - _TWO:
                return False
            if not items:
                return True
            firsts, seconds = zip(*items)
            return first(firsts) and second(seconds)
        return pairs_fit
    return None


_STR, _LIST, _TWO = frozenset({str}), frozenset({list}), frozenset({2})


def _record_checker(name: str):
    schema = RECORDS[name]
    fields = [(field, kind.rstrip("?"), kind.endswith("?")) for field, kind in schema.items()]
    compiled = [(field, kind, optional, _base_kind(kind), _checker(kind))
                for field, kind, optional in fields]

    def check_record(where, value, depth):
        unexpected = value.keys() - schema.keys()
        if unexpected:
            raise WireError(f"{where} ({name}): unexpected field(s) "
                            f"{sorted(unexpected, key=str)}; its "
                            f"fields are {sorted(schema)}")
        out = Record()
        for field, kind, optional, base, check in compiled:
            v = value.get(field)
            if v is None:
                if not optional:
                    raise WireError(f"{where} ({name}): field {field!r} ({kind}) is missing")
                continue
            out[field] = _field_value(f"{where}.{field}", kind, base, check, v, depth)
        return out
    return check_record


_HOOK_VALUE_TAGS = {"same": "int", "again": "int", "tuple": "list", "list": "list",
                    "dict": "map", "named": "map", "opaque": "str"}


def _check_hook_value(where, value, depth):
    """A hook's argument or result as disthook.service.values packs it (None, a bool,
    number or string; {"tensor": array, "requires_grad": bool, "grad_fn"?: node name};
    {"tuple"|"list": [values]};
    {"dict": {str: value}}; {"named": {"class": str, "fields": value, "items": value}} (a
    namedtuple); {"opaque": type name}), or as a hook's result refers to the
    worker's tensors ({"same": index}; {"tensor": array, "vjp": key}, with "own": true when
    it is computed from the client's own tensors that require grad too, and with "tap": key
    where a forward hook returned it, under which the worker keeps it), or stands for a
    tensor of the client that requires grad ({"tensor": array, "feed": key}: the worker's
    copy is a leaf whose gradient a backward may ask for), or is a tensor made in
    inference_mode ({"tensor": array, "inference": true}), or in a hook event of a pass run
    ahead stands for a tensor an earlier event of its round sent, unchanged since
    ({"again": its number among the tensors the round's events sent, from 0})."""
    if _hook_value_ok(value, depth):
        return value  # the common case, at once, with no message built
    return _walk_hook_value(where, value, depth)


def _walk_hook_value(where, value, depth):
    """``_check_hook_value``'s full walk, which names where a value is wrong."""
    if value is None or type(value) in _SCALARS:
        return value
    if (type(value) is dict and type(value.get("tensor")) is np.ndarray
            and type(value.get("requires_grad")) is bool
            and (len(value) == 2 or (len(value) == 3 and type(value.get("grad_fn")) is str))):
        return value
    if depth > MAX_NESTING:
        raise WireError(f"{where}: hook value nested deeper than {MAX_NESTING} levels")
    if not isinstance(value, dict):
        raise WireError(f"{where} must be a hook value (None, a number, a string or a "
                        f"tagged map), got {_type_name(value)}")
    if value.keys() in ({"ref", "requires_grad"}, {"ref", "requires_grad", "from_peer"}):
        _field_value(f"{where}.ref", "str", "str", None, value["ref"], depth)  # a kept value
        for name in ("requires_grad", "from_peer"):
            if name in value:
                _field_value(f"{where}.{name}", "bool", "bool", None, value[name], depth)
        return value
    if value.keys() in ({"tensor", "requires_grad"}, {"tensor", "vjp"}, {"tensor", "feed"},
                        {"tensor", "requires_grad", "grad_fn"}, {"tensor", "vjp", "own"},
                        {"tensor", "vjp", "tap"}, {"tensor", "vjp", "own", "tap"},
                        {"tensor", "inference"}):
        _field_value(f"{where}.tensor", "array", "array", None, value["tensor"], depth)
        for name, kind in (("requires_grad", "bool"), ("vjp", "str"), ("grad_fn", "str"),
                           ("feed", "str"), ("own", "bool"), ("inference", "bool"),
                           ("tap", "str")):
            if name in value:
                _field_value(f"{where}.{name}", kind, kind, None, value[name], depth)
        return value
    if len(value) != 1 or next(iter(value)) not in _HOOK_VALUE_TAGS:
        raise WireError(f"{where}: not a hook value: a map with keys {sorted(value, key=str)}")
    (tag, payload), = value.items()
    kind = _HOOK_VALUE_TAGS[tag]
    _field_value(f"{where}.{tag}", kind, kind, None, payload, depth)
    if tag in ("tuple", "list"):
        for i, v in enumerate(payload):
            _walk_hook_value(f"{where}.{tag}[{i}]", v, depth + 1)
    elif tag in ("dict", "named"):
        for k, v in payload.items():
            _walk_hook_value(f"{where}.{tag}[{k!r}]", v, depth + 1)
    return value


_SCALARS = frozenset({bool, int, float, str})
_PAYLOAD_TYPES = {"same": (int,), "again": (int,), "opaque": (str,)}


def _hook_value_ok(value, depth: int) -> bool:
    """Whether ``value`` is a valid hook value (as ``_check_hook_value`` sees it), with no
    message built on the way: True only where that check passes; False where it would
    raise, or where only its full walk can tell (subclasses), which then says what is wrong."""
    if type(value) is not dict:
        return value is None or type(value) in _SCALARS
    n = len(value)
    if n == 1:
        if depth >= MAX_NESTING:  # its items are checked one level deeper
            return False
        (tag, payload), = value.items()
        if tag == "tuple" or tag == "list":
            items = payload if type(payload) is list or type(payload) is tuple else None
        elif tag == "dict" or tag == "named":
            items = payload.values() if type(payload) is dict else None
        else:
            kinds = _PAYLOAD_TYPES.get(tag) if type(tag) is str else None
            return kinds is not None and type(payload) in kinds
        if items is None:
            return False
        depth += 1
        for v in items:
            if not (v is None or type(v) in _SCALARS or _hook_value_ok(v, depth)):
                return False
        return True
    if n == 2 or n == 3:
        if "tensor" in value:
            if type(value["tensor"]) is not np.ndarray:
                return False
            if n == 3 and "own" in value:
                return value["own"] is True and type(value.get("vjp")) is str
            if n == 3:
                return (type(value.get("requires_grad")) is bool
                        and type(value.get("grad_fn")) is str)
            if "requires_grad" in value:
                return type(value["requires_grad"]) is bool
            other = value.get("vjp", value.get("feed"))
            return type(other) is str
        if "ref" in value:
            return (type(value["ref"]) is str and type(value.get("requires_grad")) is bool
                    and (n == 2 or type(value.get("from_peer")) is bool))
    return False


# per message type: (field names, [(name, kind, optional, base kind, exact types of the base,
# its type check, the deep check of a structured kind or None)])
_COMPILED = {
    msg_type: (frozenset(schema), [
        (name, kind.rstrip("?"), kind.endswith("?"), _base_kind(kind.rstrip("?")),
         _EXACT[_base_kind(kind.rstrip("?"))], _CHECKS[_base_kind(kind.rstrip("?"))],
         _checker(kind.rstrip("?"))) for name, kind in schema.items()])
    for msg_type, schema in SCHEMAS.items()}
# the fields that encode walks in Python (see encode)
_WALKED = {msg_type: tuple(name for name, kind in schema.items()
                           if _base_kind(kind.rstrip("?")) in ("any", "map"))
           for msg_type, schema in SCHEMAS.items()}


WRITE_PARTS = frozenset({"set_state", "param_op", "step"})  # what a "write" carries


def write_part(part, model: str) -> Message:
    """One part of a "write" message as the message it stands for (``WireError`` when it is
    not a valid one): a stage runs it as it would run that message sent alone."""
    if not (isinstance(part, dict) and part.keys() == {"type", "fields"}
            and part["type"] in WRITE_PARTS and isinstance(part["fields"], dict)):
        raise WireError(f"'write' message: a part must be {{'type': one of "
                        f"{sorted(WRITE_PARTS)}, 'fields': map}}, got {_type_name(part)}")
    fields = {**part["fields"], "model": model}
    _validate_fields(part["type"], fields, convert=True)
    return Message(part["type"], fields=fields)


def _validate_fields(msg_type: str, fields: Mapping[str, Any], convert: bool = False) -> None:
    """Check ``fields`` against the message type's schema, sub-records included; with
    ``convert`` (a decoded message's own fields) sub-records become ``Record``s in place."""
    compiled = _COMPILED.get(msg_type)
    if compiled is None:
        raise WireError(f"unknown message type {msg_type!r}; expected one of {sorted(SCHEMAS)}")
    names, checks = compiled
    if not fields.keys() <= names:
        unexpected = fields.keys() - names
        raise WireError(f"{msg_type!r} message: unexpected field(s) "
                        f"{sorted(unexpected, key=str)}; "
                        f"its fields are {sorted(names)}")
    get = fields.get
    for name, kind, optional, base, exact, check, deep in checks:
        value = get(name)
        if value is None:
            if not optional:
                raise WireError(f"{msg_type!r} message: field {name!r} ({kind}) is missing")
            continue
        if not (base == "any" or type(value) in exact or check(value)):  # bool: no exact int
            raise WireError(f"{msg_type!r} message: field {name!r} must be {kind}, "
                            f"got {type(value).__name__}")
        if deep is not None:
            checked = deep(f"{msg_type!r} message: field {name!r}", value, 0)
            if convert:
                fields[name] = checked
