"""Transactions over remoting (RocketMQ's EndTransactionProcessor and
Broker2Client.checkProducerTransactionState), on the CBOR ops of node/ops/transactions.py:
the same half messages, the same exactly-one-outcome END, the same check service.

END_TRANSACTION (37) is the `end_transaction` op. Java clients send it oneway (the server
writes no answer then); asked two-way it answers SUCCESS, or the refusal's code with the
reason in the remark. commitOrRollback is RocketMQ's sysflag-style type: 8 COMMIT, 12
ROLLBACK, 0 (NOT_TYPE) UNKNOWN, which leaves the transaction open for the check.

A RocketMQ producer's heartbeat names its producer groups; each (group, client id) gets a
pusher on the check service's mailboxes (node/tables/transaction_checks.py), so a check for
it goes out at once as a oneway CHECK_TRANSACTION_STATE (39) on the heartbeat's channel:
CheckTransactionStateRequestHeader, and as the body the half message with its real topic
and queue id restored, in the record form MessageDecoder reads. The producer answers with an
END_TRANSACTION marked fromTransactionCheck. With aclEnable a check goes only to a producer
whose account may publish to the real topic (as `transaction_check_watch` withholds it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from store.message import Message, StoredMessage
from store.properties import PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_KEY
from store.record_codec import EncodeError, encode_record, patch_record
from wire.protocol import InvalidRequest
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand
from wire.remoting.headers import HeaderError, ext_bool, ext_int, ext_str

from ..ops.dispatch import handle_request
from ..ops.services import NodeServices
from .answers import response_code
from .channel import Processor, ProcessorContext, RemotingChannel

__all__ = ["OUTCOMES", "TRANSACTION_PROCESSORS", "check_body", "push_checks"]

log = logging.getLogger("tidemq.remoting")

OUTCOMES = {8: "COMMIT", 12: "ROLLBACK", 0: "UNKNOWN"}
"""EndTransactionRequestHeader.commitOrRollback (MessageSysFlag's TRANSACTION_COMMIT_TYPE,
TRANSACTION_ROLLBACK_TYPE, TRANSACTION_NOT_TYPE) as the CBOR op's outcome."""


async def _end_transaction(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel,
                           ) -> RemotingCommand:
    ext = cmd.ext_fields
    kind = ext_int(ext, "commitOrRollback")
    outcome = OUTCOMES.get(kind)
    if outcome is None:
        raise HeaderError(f"commitOrRollback must be 8 (commit), 12 (rollback) or 0 (unknown), got {kind}")
    frame: dict[str, Any] = {
        "op": "end_transaction", "id": 0, "producer_group": ext_str(ext, "producerGroup"),
        "tran_state_table_offset": ext_int(ext, "tranStateTableOffset"),
        "commitlog_offset": ext_int(ext, "commitLogOffset"), "outcome": outcome,
        "from_transaction_check": ext_bool(ext, "fromTransactionCheck")}
    for name, key in (("msgId", "msg_id"), ("transactionId", "transaction_id")):
        if ext_str(ext, name, ""):  # nullable, and an empty one means none
            frame[key] = ext_str(ext, name)
    try:
        request = proc.request(frame)
    except InvalidRequest as e:
        return cmd.response(ResponseCode.SYSTEM_ERROR, e.message)
    answer = await handle_request(proc.services, request, channel.peer)
    assert isinstance(answer, dict)  # only sends answer with pre-encoded frames
    code = response_code(answer["status"])
    if code != ResponseCode.SUCCESS:
        return cmd.response(code, answer.get("error") or answer["status"])
    if answer.get("duplicate"):
        log.info("END_TRANSACTION %s from %s: a duplicate, nothing written", outcome, channel.peer)
    return cmd.response(ResponseCode.SUCCESS)


def check_body(record: StoredMessage, max_message_size: int) -> bytes:
    """The half record as RocketMQ's MessageDecoder.encode writes the message a check carries:
    its real topic and queue id restored, its offsets and properties kept."""
    props = record.properties
    msg = Message(topic=props.get(PROPERTY_REAL_TOPIC, record.topic), body=record.body,
                  queue_id=int(props.get(PROPERTY_REAL_QID, "0") or 0), properties=props, flag=record.flag,
                  born_timestamp=record.born_timestamp, born_host=record.born_host, sys_flag=record.sys_flag,
                  reconsume_times=record.reconsume_times,
                  prepared_transaction_offset=record.prepared_transaction_offset)
    buf = encode_record(msg, record.store_host, max_message_size)
    patch_record(buf, record.queue_offset, record.commitlog_offset, record.store_timestamp)
    return bytes(buf)


def _push_check(services: NodeServices, channel: RemotingChannel, publisher: Callable[[str], str | None] | None,
                check: dict[str, Any]) -> None:
    topic = str(check["topic"] or "")
    lacking = publisher(topic) if publisher is not None else None
    if lacking is not None:  # aclEnable: a check shows the half message, for its producers only
        services.checks.refused += 1
        log.warning("CHECK_TRANSACTION_STATE for %s withheld from %s: %s", topic, channel.client_id, lacking)
        return
    record = services.store.look_message_by_offset(check["commitlog_offset"])
    if record is None:  # gone from the log meanwhile: a later round finds it gone too
        return
    try:
        body = check_body(record, services.cfg.store.max_message_size)
    except EncodeError as e:
        log.warning("CHECK_TRANSACTION_STATE at CommitLog offset %d not sent: %s", record.commitlog_offset, e)
        return
    uniq = record.properties.get(PROPERTY_UNIQ_KEY)
    header = {"tranStateTableOffset": str(record.queue_offset), "commitLogOffset": str(record.commitlog_offset),
              "offsetMsgId": record.msg_id}
    if uniq:
        header["msgId"] = uniq
    transaction_id = check.get("transaction_id") or uniq
    if transaction_id:
        header["transactionId"] = str(transaction_id)
    channel.push(RequestCode.CHECK_TRANSACTION_STATE, header, body)


def push_checks(services: NodeServices, group: str, channel: RemotingChannel,
                publisher: Callable[[str], str | None] | None) -> None:
    """A heartbeat named `group` among its producer groups: its checks go to `channel`."""
    if channel.client_id is not None:
        services.checks.push_to(group, channel.client_id, partial(_push_check, services, channel, publisher), channel)


TRANSACTION_PROCESSORS: dict[int, Processor] = {
    RequestCode.END_TRANSACTION: _end_transaction,
}
