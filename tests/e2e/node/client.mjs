// The official `openai` npm package as a client (tests/e2e/test_gateway_node.py).
// Reads a JSON array of jobs on stdin: {base_url, model, stream, extra}
// and prints one JSON array: per job {items, error}, where items are the
// chunks (stream) or the one completion object (whole) as the SDK hands
// them out, and error is [name, message] of what it threw, or null.
import OpenAI from "openai";

const input = await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (d) => (data += d));
  process.stdin.on("end", () => resolve(data));
});
const jobs = JSON.parse(input);
const out = [];
for (const job of jobs) {
  const client = new OpenAI({ baseURL: job.base_url + "/v1", apiKey: "sk-node", maxRetries: 0, timeout: 60000 });
  const items = [];
  let error = null;
  try {
    const params = {
      model: job.model,
      messages: [{ role: "user", content: "What is the capital of Portugal?" }],
      stream: job.stream,
      ...(job.extra || {}),
    };
    const res = await client.chat.completions.create(params);
    if (job.stream) {
      for await (const chunk of res) items.push(chunk);
    } else {
      items.push(res);
    }
  } catch (e) {
    error = [e.constructor.name, String(e.message)];
  }
  out.push({ items, error });
}
process.stdout.write(JSON.stringify(out));
