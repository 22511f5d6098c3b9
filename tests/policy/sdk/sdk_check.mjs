// Drives the project's policy server with the official OpenAI SDK for Node: model listing,
// completions, chat, both streamed, and the SDK's error classes. Exits non-zero on the first
// mismatch. Usage: node sdk_check.mjs BASE_URL MODEL PROMPT   (BASE_URL ends in /v1)
import OpenAI from 'openai';

const [baseURL, model, prompt] = process.argv.slice(2);
if (!baseURL || !model || !prompt) {
  console.error('usage: node sdk_check.mjs BASE_URL MODEL PROMPT');
  process.exit(2);
}

// No retries: a fault must show, not be papered over. Every request has a timeout.
const client = new OpenAI({ baseURL, apiKey: 'not-needed', maxRetries: 0, timeout: 20000 });

function check(condition, what, detail) {
  if (!condition) {
    throw new Error(`${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
  }
  console.log(`ok - ${what}`);
}

async function main() {
  const models = await client.models.list();
  check(models.data.some((m) => m.id === model), 'models.list names the served model', models.data);

  const completion = await client.completions.create({
    model, prompt, max_tokens: 1000, seed: 1, logprobs: 0,
  });
  const choice = completion.choices[0];
  check(completion.object === 'text_completion', 'completion object');
  check(choice.text.includes('```'), 'completion text holds a fenced block', choice.text);
  check(choice.finish_reason === 'stop', 'completion finish_reason', choice.finish_reason);
  check(choice.logprobs.token_logprobs.every((lp) => lp < 0), 'completion logprobs are negative');
  check(completion.usage.completion_tokens === choice.logprobs.tokens.length, 'completion usage');

  // vLLM's extras pass through the SDK as extra body fields.
  const withIds = await client.completions.create({
    model, prompt: [72, 105], max_tokens: 4, return_token_ids: true,
  });
  check(Array.isArray(withIds.choices[0].token_ids) && withIds.choices[0].token_ids.length === 4,
    'return_token_ids gives token_ids', withIds.choices[0]);
  check(withIds.choices[0].finish_reason === 'length', 'max_tokens ends with length');

  let streamedText = '';
  let streamedFinish = null;
  const completionStream = await client.completions.create({
    model, prompt, max_tokens: 1000, seed: 1, stream: true,
  });
  for await (const chunk of completionStream) {
    streamedText += chunk.choices[0].text;
    streamedFinish = chunk.choices[0].finish_reason ?? streamedFinish;
  }
  check(streamedText === choice.text, 'streamed completion equals the whole one');
  check(streamedFinish === 'stop', 'streamed completion finishes with stop', streamedFinish);

  const messages = [{ role: 'system', content: 'You write kernels.' }, { role: 'user', content: prompt }];
  const chat = await client.chat.completions.create({
    model, messages, seed: 2, max_completion_tokens: 2000, logprobs: true, top_logprobs: 2,
  });
  const message = chat.choices[0].message;
  check(chat.object === 'chat.completion', 'chat object');
  check(message.role === 'assistant', 'chat role');
  check(message.content.includes('```'), 'chat content holds a fenced block', message.content);
  check(chat.choices[0].logprobs.content.length === chat.usage.completion_tokens,
    'chat logprobs cover every token');
  check(chat.choices[0].logprobs.content[0].top_logprobs.length === 2, 'chat top_logprobs');

  let chatText = '';
  let roles = 0;
  let usage = null;
  let finish = null;
  const chatStream = await client.chat.completions.create({
    model, messages, seed: 2, max_completion_tokens: 2000, stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of chatStream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    const delta = chunk.choices[0].delta;
    if (delta.role) roles += 1;
    chatText += delta.content ?? '';
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  check(chatText === message.content, 'streamed chat equals the whole one');
  check(roles === 1, 'the role comes once, in the first chunk', roles);
  check(finish === 'stop', 'streamed chat finishes with stop', finish);
  check(usage && usage.completion_tokens === chat.usage.completion_tokens, 'stream usage', usage);

  // The SDK's streaming helper accumulates the same message.
  const runner = client.chat.completions.stream({ model, messages, seed: 2, max_completion_tokens: 2000 });
  const final = await runner.finalChatCompletion();
  check(final.choices[0].message.content === message.content, 'stream helper final message');

  try {
    await client.completions.create({ model: 'no-such-model', prompt: 'x' });
    check(false, 'an unknown model is refused');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError && e.status === 404, 'unknown model -> NotFoundError',
      String(e));
  }
  try {
    await client.completions.create({ model, prompt: 'x', top_p: 0 });
    check(false, 'a bad top_p is refused');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.message.includes('top_p'),
      'bad top_p -> BadRequestError naming the key', String(e));
  }
  console.log('sdk check passed');
}

main().catch((e) => {
  console.error(`FAIL: ${e.message}`);
  process.exit(1);
});
