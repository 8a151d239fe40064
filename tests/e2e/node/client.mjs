// The official `openai` npm package as a client (tests/e2e/test_gateway_node.py).
// Reads a JSON array of jobs on stdin: {base_url, model, stream, extra, api}
// and prints one JSON array: per job {items, error}, where items are the
// chunks (stream) or the one completion object (whole) as the SDK hands
// them out, and error is [name, message] of what it threw, or null.
// `api`: "chat" (default, `chat.completions.create`), "responses"
// (`responses.create`: the events, or the one response) or
// "responses_stream" (`responses.stream(...)`: the events, then its
// `finalResponse()`).
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
    const question = "What is the capital of Portugal?";
    const api = job.api || "chat";
    const params =
      api === "chat"
        ? { model: job.model, messages: [{ role: "user", content: question }], stream: job.stream, ...(job.extra || {}) }
        : { model: job.model, input: question, ...(api === "responses" ? { stream: job.stream } : {}), ...(job.extra || {}) };
    if (api === "responses_stream") {
      const stream = client.responses.stream(params);
      for await (const event of stream) items.push(event);
      items.push(await stream.finalResponse());
      out.push({ items, error });
      continue;
    }
    const res = api === "chat" ? await client.chat.completions.create(params) : await client.responses.create(params);
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
