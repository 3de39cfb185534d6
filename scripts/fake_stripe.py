"""A local server playing the one Stripe call the gateway makes, for the checks that run a whole
gateway (scripts/start_gateway.sh starts it): `POST /v1/checkout/sessions`, form-encoded, with
`Authorization: Bearer <key>` and an `Idempotency-Key`, answered with a Checkout Session object as
Stripe's API reference shows it (the same key answers the same session). Anything else is Stripe's
error shape. Nothing leaves the machine.

Usage: python fake_stripe.py PORT_FILE SECRET_KEY   (writes the port it listens on to PORT_FILE)
"""

import json
import sys
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, SECRET_KEY = sys.argv[1], sys.argv[2]
SESSIONS = {}


class Stripe(BaseHTTPRequestHandler):
    def log_message(self, *_):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, message):
        self.answer(status, {"error": {"type": "invalid_request_error", "message": message}})

    def do_POST(self):  # noqa: N802 - the http.server name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        if self.path != "/v1/checkout/sessions":
            return self.error(404, f"Unrecognized request URL (POST: {self.path})")
        if self.headers.get("Authorization") != f"Bearer {SECRET_KEY}":
            return self.error(401, "Invalid API Key provided")
        form = dict(urllib.parse.parse_qsl(body))
        for field in ("mode", "line_items[0][price_data][currency]", "line_items[0][price_data][unit_amount]",
                      "line_items[0][price_data][product_data][name]", "line_items[0][quantity]",
                      "client_reference_id", "success_url", "cancel_url"):
            if not form.get(field):
                return self.error(400, f"Missing required param: {field}.")
        key = self.headers.get("Idempotency-Key") or str(uuid.uuid4())
        if key not in SESSIONS:
            sid = f"cs_test_{uuid.uuid4().hex}"
            SESSIONS[key] = {
                "id": sid, "object": "checkout.session", "mode": form["mode"], "status": "open",
                "payment_status": "unpaid", "currency": form["line_items[0][price_data][currency]"],
                "amount_total": int(form["line_items[0][price_data][unit_amount]"]),
                "client_reference_id": form["client_reference_id"],
                "metadata": {"user_id": form.get("metadata[user_id]")},
                "success_url": form["success_url"], "cancel_url": form["cancel_url"],
                "url": f"https://checkout.stripe.com/c/pay/{sid}", "livemode": False,
            }
        return self.answer(200, SESSIONS[key])


server = ThreadingHTTPServer(("127.0.0.1", 0), Stripe)
with open(PORT_FILE, "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
