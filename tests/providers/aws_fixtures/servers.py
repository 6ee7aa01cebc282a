"""Real local servers the AWS tests talk to through the real SDK, all on 127.0.0.1.

* moto's ThreadedMotoServer (EC2, STS) on a free port;
* capacity_proxy: a small HTTP proxy in front of moto that answers selected RunInstances
  calls with EC2's real InsufficientInstanceCapacity error body, so failover is exercised
  through botocore's real error path (moto cannot produce that error); it also plays
  scripted EC2 errors, loses answers, and can stand in for EC2's network and cloud-init
  (instances' public address = a loopback sshd; imported key pairs authorized there);
* PricingReplay: the Price List Query API (JSON 1.1 protocol, ``AWSPriceListService.
  GetProducts``), which moto does not implement, replaying recorded products with
  TERM_MATCH filtering, NextToken paging, throttling and auth failures;
* ImdsServer: the IMDSv2 token + spot/instance-action endpoints the watcher reads.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import urllib.parse
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from tests.fixtures.http_fake import serve
from tests.providers.aws_fixtures import placement
from tests.remote.sshd import SSHDServer

HERE = Path(__file__).resolve().parent

# EC2's error response shape ("Example error response" in
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html#api-error-response):
# <Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>.
# InsufficientInstanceCapacity is listed there as a server error (HTTP 500); the message
# is the one EC2 returns for it.
INSUFFICIENT_CAPACITY_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Response><Errors><Error><Code>InsufficientInstanceCapacity</Code><Message>"
    "We currently do not have sufficient {itype} capacity in the Availability Zone you "
    "requested ({zone}). Our system will be working on provisioning additional capacity. "
    "You can currently get {itype} capacity by not specifying an Availability Zone in your "
    "request or choosing {others}.</Message></Error></Errors>"
    "<RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>"
)


def ec2_error(code: str, message: str) -> bytes:
    """An EC2 error body in the documented shape (see INSUFFICIENT_CAPACITY_XML)."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        "</Errors><RequestID>5b6c2e6e-4f5f-4e8e-9f47-example</RequestID></Response>"
    ).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_ACTIVE: list[int] = []  # ports of the moto servers up now


@contextmanager
def moto_server() -> Iterator[str]:
    """A ThreadedMotoServer on a free loopback port; yields its URL."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    _ACTIVE.append(port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        _ACTIVE.remove(port)
        if not _ACTIVE:
            # moto keeps one set of backends per process, whichever server answers: the
            # next module starts from a fresh account (with its default VPC back).
            conn = HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/moto-api/reset")
            conn.getresponse().read()
            conn.close()
        server.stop()


def url_of(server: HTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(
        self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


class CapacityProxyHandler(_Quiet):
    """Forwards to moto; RunInstances into ``fail_zones`` / of ``fail_types`` get the
    real InsufficientInstanceCapacity error instead, and scripted answers go first."""

    server: Any

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        form = urllib.parse.parse_qs(body.decode())
        action = form.get("Action", [""])[0]
        zone = form.get("Placement.AvailabilityZone", [""])[0]
        itype = form.get("InstanceType", [""])[0]
        srv = self.server
        queued = srv.scripted.get(action)
        if queued:
            status, payload = queued.pop(0)
            srv.refused.append((action, status))
            self._send(status, payload, "text/xml")
            return
        if action in placement.ACTIONS:
            self._send(*placement.answer(srv.placement, action, form, self._live), "text/xml")
            return
        wanted: list[str] = []
        if action == "DescribeInstances":
            form, wanted = placement.strip_group_filter(form)
            body = urllib.parse.urlencode(form, doseq=True).encode()
        refused = placement.refuse_run(srv.placement, form) if action == "RunInstances" else None
        if refused is not None:
            self._send(*refused, "text/xml")
            return
        if action == "RunInstances" and (zone in srv.fail_zones or itype in srv.fail_types):
            srv.refused.append((itype, zone))
            xml = INSUFFICIENT_CAPACITY_XML.format(
                itype=itype, zone=zone or "us-east-1a", others="us-east-1c, us-east-1d"
            )
            self._send(500, xml.encode(), "text/xml")
            return
        status, data, ctype = self._forward(body)
        if action == "ImportKeyPair" and status == 200 and srv.authorized_keys is not None:
            # What cloud-init does on an EC2 instance with its launch key pair.
            key = base64.b64decode(form["PublicKeyMaterial"][0]).decode().strip()
            with open(srv.authorized_keys, "a") as fh:
                fh.write(key + "\n")
        if srv.public_ip and action in ("RunInstances", "DescribeInstances"):
            # The instance's public address, as this test network routes it.
            data = re.sub(
                rb"<ipAddress>[^<]*</ipAddress>",
                b"<ipAddress>" + srv.public_ip.encode() + b"</ipAddress>",
                data,
            )
        if action in ("RunInstances", "DescribeInstances"):
            data = _link_spot_requests(srv, action, data)
            if status == 200:
                data = placement.annotate(srv.placement, action, form, data, wanted)
        if action in srv.lose:
            # The call reached EC2 but its answer is lost on the way back, as on a
            # timeout: the client sees a 503 although the instance exists.
            srv.refused.append((action, 503))
            self._send(503, ec2_error("ServiceUnavailable", "Service unavailable."), "text/xml")
            return
        self._send(status, data, ctype)

    def _live(self, ids: list[str]) -> list[str]:
        """Which of these instances moto still has up (for DeletePlacementGroup)."""
        if not ids:
            return []
        form = {"Action": ["DescribeInstances"], "Version": ["2016-11-15"]}
        form.update({f"InstanceId.{i}": [iid] for i, iid in enumerate(ids, 1)})
        _, data, _ = self._forward(urllib.parse.urlencode(form, doseq=True).encode())
        states = re.findall(
            rb"<instanceId>(i-[0-9a-f]+)</instanceId>.*?<name>([a-z-]+)</name>", data, re.S
        )
        return [i.decode() for i, st in states if st.decode() in placement.LIVE]

    def _forward(self, body: bytes) -> tuple[int, bytes, str]:
        srv = self.server
        up = urllib.parse.urlsplit(srv.upstream)
        conn = HTTPConnection(up.hostname, up.port, timeout=30)
        skip = ("host", "content-length")  # the body may have been rewritten
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        headers["Host"] = up.netloc
        headers["Content-Length"] = str(len(body))
        conn.request("POST", self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, data, resp.getheader("Content-Type", "text/xml")


def _link_spot_requests(srv: Any, action: str, data: bytes) -> bytes:
    """Real EC2 links each spot instance to its spot request; moto leaves the link out.
    Each new spot instance takes the next of ``srv.spot_request_ids``."""
    if not srv.spot_request_ids and not srv.spot_links:
        return data
    root = ElementTree.fromstring(data)
    ns = root.tag[1 : root.tag.index("}")] if root.tag.startswith("{") else ""
    q = f"{{{ns}}}" if ns else ""
    ElementTree.register_namespace("", ns)
    for item in root.iter(f"{q}item"):
        iid, life = item.find(f"{q}instanceId"), item.find(f"{q}instanceLifecycle")
        if iid is None or life is None or life.text != "spot" or not iid.text:
            continue
        new = action == "RunInstances" and iid.text not in srv.spot_links
        if new and srv.spot_request_ids:
            srv.spot_links[iid.text] = srv.spot_request_ids.pop(0)
        link = srv.spot_links.get(iid.text)
        if link and item.find(f"{q}spotInstanceRequestId") is None:
            ElementTree.SubElement(item, f"{q}spotInstanceRequestId").text = link
    return bytes(ElementTree.tostring(root, encoding="utf-8", xml_declaration=True))


@contextmanager
def capacity_proxy(
    upstream: str,
    fail_zones: frozenset[str] = frozenset(),
    fail_types: frozenset[str] = frozenset(),
    scripted: dict[str, list[tuple[int, bytes]]] | None = None,
    lose: frozenset[str] = frozenset(),
    public_ip: str = "",
    authorized_keys: Path | None = None,
    spot_request_ids: tuple[str, ...] = (),
) -> Iterator[ThreadingHTTPServer]:
    """``scripted``: per EC2 Action, (status, body) answered first, in order;
    ``lose``: Actions forwarded to moto whose answer is replaced by a 503;
    ``public_ip``: the address instances report (e.g. a loopback sshd's);
    ``authorized_keys``: where imported key pairs are authorized, as cloud-init does;
    ``spot_request_ids``: the spot request each new spot instance reports, in order
    (moto links none)."""
    with serve(
        CapacityProxyHandler,
        upstream=upstream,
        fail_zones=set(fail_zones),
        fail_types=set(fail_types),
        scripted=dict(scripted or {}),
        lose=set(lose),
        public_ip=public_ip,
        authorized_keys=authorized_keys,
        spot_request_ids=list(spot_request_ids),
        spot_links={},
        refused=[],
        placement=placement.Groups(),
    ) as server:
        yield server


def sshd_network(
    upstream: str, sshd: SSHDServer, **kw: Any
) -> AbstractContextManager[ThreadingHTTPServer]:
    """``capacity_proxy`` (``kw`` as there) playing EC2's network and cloud-init for
    instances that are the loopback ``sshd``: their public address is 127.0.0.1 and the
    imported key pair is authorized in its authorized_keys."""
    return capacity_proxy(
        upstream, public_ip="127.0.0.1", authorized_keys=sshd.dir / "authorized_keys", **kw
    )


@contextmanager
def ec2_server() -> Iterator[str]:
    """EC2 as the provider sees it: moto behind the proxy, which adds the placement
    groups moto lacks (every ``down --orphans`` sweep describes them); yields its URL."""
    with moto_server() as upstream, capacity_proxy(upstream) as front:
        yield url_of(front)


def load_products(region: str = "us-east-1") -> list[dict[str, Any]]:
    data = json.loads((HERE / f"pricing_get_products_{region}.json").read_text())
    return list(data["products"])


class PricingHandler(_Quiet):
    """AWSPriceListService.GetProducts over the JSON 1.1 protocol."""

    server: Any

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        srv.requests.append({"target": self.headers.get("X-Amz-Target"), "body": body})
        if srv.faults:
            status, kind = srv.faults.pop(0)
            payload = (
                b""
                if kind is None
                else json.dumps(
                    {"__type": kind, "message": srv.fault_messages.get(kind, kind)}
                ).encode()
            )
            self._send(status, payload, "application/x-amz-json-1.1")
            return
        if self.headers.get("X-Amz-Target") != "AWSPriceListService.GetProducts":
            self._send(400, b'{"__type":"UnknownOperationException"}', "application/x-amz-json-1.1")
            return
        wanted = {
            f["Field"]: f["Value"] for f in body.get("Filters", []) if f["Type"] == "TERM_MATCH"
        }
        rows = [
            p
            for p in srv.products
            if p["serviceCode"] == body.get("ServiceCode")
            and all(p["product"]["attributes"].get(k) == v for k, v in wanted.items())
        ]
        start = int(body.get("NextToken") or 0)
        size = int(body.get("MaxResults") or 100)
        page = rows[start : start + min(size, srv.page_size)]
        out: dict[str, Any] = {
            "FormatVersion": "aws_v1",
            "PriceList": [json.dumps(p) for p in page],
        }
        if start + len(page) < len(rows):
            out["NextToken"] = str(start + len(page))
        self._send(200, json.dumps(out).encode(), "application/x-amz-json-1.1")


@contextmanager
def pricing_replay(
    products: list[dict[str, Any]],
    page_size: int = 3,
    faults: list[tuple[int, str | None]] | None = None,
) -> Iterator[ThreadingHTTPServer]:
    """``faults``: (status, __type or None for an empty body) answered first, in order."""
    messages = {
        "ThrottlingException": "Rate exceeded",
        "UnrecognizedClientException": "The security token included in the request is invalid.",
        "AccessDeniedException": "User is not authorized to perform: pricing:GetProducts",
    }
    with serve(
        PricingHandler,
        products=products,
        page_size=page_size,
        faults=list(faults or []),
        fault_messages=messages,
        requests=[],
    ) as server:
        yield server


class ImdsHandler(_Quiet):
    """IMDSv2: PUT /latest/api/token, then GETs carrying X-aws-ec2-metadata-token.

    spot/instance-action answers 404 until ``action`` is set (and ``notice_after`` GETs
    have passed), then 200 with it; ``one_shot`` serves it once, as the next instance's
    own IMDS would say 404 (lifecycle tests run both instances on one host).
    events/recommendations/rebalance answers 200 ``rebalance`` when set, else 404
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html).
    """

    server: Any

    def do_PUT(self) -> None:
        if self.path != "/latest/api/token" or not self.headers.get(
            "X-aws-ec2-metadata-token-ttl-seconds"
        ):
            self._send(400, b"", "text/plain")
            return
        self.server.tokens_issued += 1
        self._send(200, self.server.token.encode(), "text/plain")

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != self.server.token:
            self._send(401, b"", "text/plain")
            return
        self.server.gets += 1
        if self.server.gets == self.server.expire_after:
            self.server.token += "-renewed"  # the session token the client holds expires
        if (
            self.path == "/latest/meta-data/spot/instance-action"
            and self.server.action
            and (self.server.gets > self.server.notice_after)
        ):
            self._send(200, json.dumps(self.server.action).encode(), "text/plain")
            if self.server.one_shot:
                self.server.action = None
            return
        rebalance = self.server.rebalance
        if self.path == "/latest/meta-data/events/recommendations/rebalance" and rebalance:
            self._send(200, json.dumps(rebalance).encode(), "text/plain")
            return
        self._send(404, b'<?xml version="1.0"?><html><body>Not Found</body></html>', "text/html")


@contextmanager
def imds_server(
    action: dict[str, str] | None,
    notice_after: int = 0,
    expire_after: int = 0,
    rebalance: dict[str, str] | None = None,
    one_shot: bool = False,
) -> Iterator[ThreadingHTTPServer]:
    with serve(
        ImdsHandler,
        token="AQAEAFakeTokenForTests==",
        action=action,
        notice_after=notice_after,
        expire_after=expire_after,
        rebalance=rebalance,
        one_shot=one_shot,
        tokens_issued=0,
        gets=0,
    ) as server:
        yield server
