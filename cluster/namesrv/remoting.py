"""The name server's answers to RocketMQ's remoting clients: GET_ROUTEINFO_BY_TOPIC,
GET_BROKER_CLUSTER_INFO and GET_ALL_TOPIC_LIST_FROM_NAMESERVER, from the same route table
the CBOR ops read (J-namesrv DefaultRequestProcessor).

A route lists the brokers the name server believes alive, by brokerId, at the client port
each registered: that port answers remoting too. A topic no broker serves is TOPIC_NOT_EXIST,
and a RocketMQ client then asks for `TBW102`'s route, which every node with
autoCreateTopicEnable registers, to send a topic's first message (node/registration.py).
"""

from __future__ import annotations

import logging
from typing import Any

from node.remoting.channel import Finish, RemotingChannel
from wire.remoting.bodies import json_body, route_body
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand
from wire.remoting.headers import HeaderError, ext_str

from .route_table import RouteTable

log = logging.getLogger("tidemq.namesrv")

__all__ = ["NamesrvRemoting"]


class NamesrvRemoting:
    """The name server's RemotingService (node/remoting/channel.py)."""

    ordered: frozenset[int] = frozenset()

    def __init__(self, table: RouteTable) -> None:
        self.table = table

    def closed(self, channel: RemotingChannel) -> None:
        pass

    async def start(self, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand | Finish | None:
        try:
            if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                return self._route(cmd)
            if cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
                return cmd.response(ResponseCode.SUCCESS, body=json_body(self._cluster_info()))
            if cmd.code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
                return cmd.response(ResponseCode.SUCCESS, body=json_body({"topicList": self._topics()}))
        except HeaderError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")

    def _route(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = ext_str(cmd.ext_fields, "topic")
        self.table.expire()
        groups = self.table.route(topic)
        brokers, queues = [], []
        for g in groups:
            addrs = {str(b.broker_id): b.address for b in g.brokers if b.alive}
            brokers.append({"brokerAddrs": addrs, "brokerName": g.broker_name, "cluster": g.cluster})
            if g.queue_data is not None:
                q = g.queue_data
                queues.append({"brokerName": g.broker_name, "perm": q.perm, "readQueueNums": q.read_queue_nums,
                               "topicSysFlag": 0, "writeQueueNums": q.write_queue_nums})
        if not groups:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"No topic route info in name server for the topic: {topic}")
        return cmd.response(ResponseCode.SUCCESS, body=route_body(brokers, queues))

    def _cluster_info(self) -> dict[str, Any]:
        self.table.expire()
        groups: dict[str, dict[str, Any]] = {}
        clusters: dict[str, list[str]] = {}
        for b in self.table.cluster_info():
            name = b["broker_name"]
            group = groups.setdefault(name, {"brokerAddrs": {}, "brokerName": name, "cluster": b["cluster"]})
            if b.get("alive", True):
                group["brokerAddrs"][str(b["broker_id"])] = b["address"]
            names = clusters.setdefault(b["cluster"], [])
            if name not in names:
                names.append(name)
        return {"brokerAddrTable": groups, "clusterAddrTable": clusters}

    def _topics(self) -> list[str]:
        return sorted({t for b in self.table.cluster_info() for t in b["topics"]})
