"""The generated-client check (issue 14): a client generated from the served
document by openapi-python-client is imported and used as a user would.

    generated_client.py BASE_URL KEY PACKAGE_PARENT_DIR

Lists sent mail with a filter and a cursor (two sends, a page of one), creates
a webhook and reads a thread, all through the generated functions and models;
it sends through the generated `send_email` (a client without one fails). Any
error, unexpected status or reply the client cannot parse fails the check.
"""

import importlib
import sys

base, key, parent = sys.argv[1:4]
sys.path.insert(0, parent)
pc = importlib.import_module("pigeonhole_client")
from pigeonhole_client import AuthenticatedClient  # noqa: E402
from pigeonhole_client.api.emails import list_emails  # noqa: E402
from pigeonhole_client.api.threads import get_thread  # noqa: E402
from pigeonhole_client.api.webhooks import create_webhook  # noqa: E402
from pigeonhole_client.models.error import Error  # noqa: E402
from pigeonhole_client.models.webhook_create import WebhookCreate  # noqa: E402
from pigeonhole_client.types import UNSET  # noqa: E402

client = AuthenticatedClient(base_url=base, token=key, raise_on_unexpected_status=True)


def ok(what, response, status):
    """The parsed reply of a call that had to answer `status`."""
    if response.status_code != status or response.parsed is None or isinstance(response.parsed, Error):
        raise SystemExit(f"{what}: {response.status_code} {response.content!r}")
    return response.parsed




try:
    send_email = importlib.import_module("pigeonhole_client.api.emails.send_email")
except ModuleNotFoundError:
    raise SystemExit("the generated client has no send_email: the generator dropped POST /emails")

sent = []
for subject in ("first", "second"):
    from pigeonhole_client.models.send_request import SendRequest

    body = SendRequest.from_dict({
        "from": "hello@example.com",
        "to": "success@simulator.amazonses.com",
        "subject": subject,
        "text": "Sent through the generated client.",
    })
    reply = send_email.sync_detailed(client=client, body=body)
    if reply.status_code not in (200, 201, 202) or isinstance(reply.parsed, Error) or reply.parsed is None:
        raise SystemExit(f"send_email: {reply.status_code} {reply.content!r}")
    sent.append(reply.parsed.id)
print(f"sent {sent}")

# Two pages of one, filtered by sender, the second reached with the cursor.
seen = []
page = ok("list_emails", list_emails.sync_detailed(client=client, limit=1, from_="hello@example.com"), 200)
seen += [m.id for m in page.data]
if not page.has_more or page.next_cursor is UNSET or not page.next_cursor:
    raise SystemExit(f"list_emails: expected a next_cursor after one of two, got {page.to_dict()}")
thread_id = page.data[0].thread_id
page = ok(
    "list_emails (cursor)",
    list_emails.sync_detailed(client=client, limit=1, from_="hello@example.com", cursor=page.next_cursor),
    200,
)
seen += [m.id for m in page.data]
if page.has_more or page.next_cursor not in (UNSET, None):
    raise SystemExit(f"list_emails: the second page should be the last, got {page.to_dict()}")
if sorted(seen) != sorted(sent):
    raise SystemExit(f"list_emails: pages held {seen}, sent {sent}")
print(f"listed {seen} in two pages")

hook = ok(
    "create_webhook",
    create_webhook.sync_detailed(
        client=client,
        body=WebhookCreate.from_dict({"url": "http://127.0.0.1:9/generated-client", "events": ["email.sent"]}),
    ),
    201,
)
print(f"created webhook {hook.id}")

thread = ok("get_thread", get_thread.sync_detailed(thread_id, client=client), 200)
if thread.id != thread_id or not thread.messages:
    raise SystemExit(f"get_thread: {thread.to_dict()}")
print(f"read thread {thread.id} with {len(thread.messages)} message(s)")
print("generated client: ok")
