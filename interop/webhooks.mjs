// webhooks.mjs checks webhook deliveries with the official Standard Webhooks
// library for JavaScript (npm standardwebhooks), for aguard's tests: it is
// driven by internal/interop (Go), VerifyWebhooks.
//
// stdin:  {"secret": "…", "raw": false, "deliveries": [{"headers": {…}, "body": "…"}]}
//         raw: the secret is the key itself, not whsec_<base64>.
// stdout: [{"ok": true} | {"ok": false, "error": "…"}], one per delivery.
import { Webhook } from "standardwebhooks";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { secret, raw, deliveries } = JSON.parse(input);
const wh = raw ? new Webhook(secret, { format: "raw" }) : new Webhook(secret);
const out = deliveries.map(({ headers, body }) => {
  try {
    wh.verify(body, headers);
    return { ok: true };
  } catch (err) {
    return { ok: false, error: String(err && err.message ? err.message : err) };
  }
});
process.stdout.write(JSON.stringify(out));
