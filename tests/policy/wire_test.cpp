#include "policy/wire/wire.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace leap::policy {
namespace {

using nlohmann::json;

template <class T>
struct parse_case {
  std::string body;   // request JSON
  std::string error;  // expected error substring; empty: must parse
  std::function<void(const T&)> check;
};

template <class T, class Parse>
void run_cases(const std::vector<parse_case<T>>& cases, Parse parse) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    const auto parsed = parse(json::parse(c.body));
    if (c.error.empty()) {
      ASSERT_TRUE(parsed.ok()) << parsed.err().message;
      if (c.check) {
        c.check(parsed.value());
      }
    } else {
      ASSERT_FALSE(parsed.ok());
      EXPECT_NE(parsed.err().message.find(c.error), std::string::npos) << parsed.err().message;
    }
  }
}

TEST(WireCompletion, ParseTable) {
  using r = completion_request;
  const std::vector<parse_case<r>> cases = {
      {R"({"prompt": "hello"})", "",
       [](const r& q) {
         ASSERT_EQ(q.prompts.size(), 1U);
         EXPECT_EQ(q.prompts[0].text, "hello");
         EXPECT_EQ(q.sampling.n, 1);
         EXPECT_FALSE(q.sampling.max_tokens.has_value());
         EXPECT_DOUBLE_EQ(q.sampling.temperature, 1.0);
         EXPECT_TRUE(q.sampling.skip_special_tokens);
         EXPECT_FALSE(q.logprobs.has_value());
         EXPECT_FALSE(q.stream);
       }},
      {R"({"model": "m", "prompt": [1, 2, 3], "return_token_ids": true, "logprobs": 0,
           "skip_special_tokens": false, "stop_token_ids": [259], "max_tokens": 64, "n": 4,
           "temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 42, "stop": "\n\n"})",
       "",
       [](const r& q) {
         EXPECT_EQ(q.model, "m");
         ASSERT_EQ(q.prompts.size(), 1U);
         EXPECT_EQ(q.prompts[0].ids, (std::vector<token_id>{1, 2, 3}));
         EXPECT_TRUE(q.return_token_ids);
         EXPECT_EQ(q.logprobs, 0);
         EXPECT_FALSE(q.sampling.skip_special_tokens);
         EXPECT_EQ(q.sampling.stop_token_ids, std::vector<token_id>{259});
         EXPECT_EQ(q.sampling.max_tokens, 64);
         EXPECT_EQ(q.sampling.n, 4);
         EXPECT_DOUBLE_EQ(q.sampling.temperature, 0.7);
         EXPECT_DOUBLE_EQ(q.sampling.top_p, 0.9);
         EXPECT_EQ(q.sampling.top_k, 20);
         EXPECT_EQ(q.sampling.seed, 42);
         EXPECT_EQ(q.sampling.stop, std::vector<std::string>{"\n\n"});
       }},
      {R"({"prompt": [[1, 2], [3]]})", "",
       [](const r& q) {
         ASSERT_EQ(q.prompts.size(), 2U);
         EXPECT_EQ(q.prompts[1].ids, std::vector<token_id>{3});
       }},
      {R"({"prompt": ["a", "b"], "stop": ["x", "y"]})", "",
       [](const r& q) {
         ASSERT_EQ(q.prompts.size(), 2U);
         EXPECT_EQ(q.sampling.stop.size(), 2U);
       }},
      {R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": true}})", "",
       [](const r& q) {
         EXPECT_TRUE(q.stream);
         EXPECT_TRUE(q.include_usage);
       }},
      {R"({"prompt": "a", "max_tokens": 16.0, "temperature": 0, "top_k": -1})", "",
       [](const r& q) { EXPECT_EQ(q.sampling.max_tokens, 16); }},
      {R"({"prompt": "a", "max_tokens": null, "seed": null})", "",
       [](const r& q) { EXPECT_FALSE(q.sampling.seed.has_value()); }},
      {R"({})", "'prompt' is required"},
      {R"([1, 2])", "must be a JSON object"},
      {R"({"prompt": 5})", "'prompt' must be a string, a list of strings, a list of token ids"},
      {R"({"prompt": []})", "'prompt' must not be empty"},
      {R"({"prompt": [[]]})", "empty list of token ids"},
      {R"({"prompt": [1, "a"]})", "'prompt' must hold integer token ids"},
      {R"({"prompt": [-4]})", "token id -4"},
      {R"({"prompt": [{"x": 1}]})", "in the list"},
      {R"({"prompt": "a", "max_tokens": 0})", "'max_tokens' must be at least 1 (got 0)"},
      {R"({"prompt": "a", "max_tokens": "ten"})", "'max_tokens' must be an integer"},
      {R"({"prompt": "a", "n": 0})", "'n' must be in [1, 128]"},
      {R"({"prompt": "a", "temperature": -1})", "'temperature' must be at least 0"},
      {R"({"prompt": "a", "temperature": "hot"})", "'temperature' must be a number"},
      {R"({"prompt": "a", "top_p": 0})", "'top_p' must be in (0, 1]"},
      {R"({"prompt": "a", "top_p": 1.5})", "'top_p' must be in (0, 1]"},
      {R"({"prompt": "a", "top_k": -2})", "'top_k' must be at least -1 (got -2)"},
      {R"({"prompt": "a", "logprobs": 21})", "'logprobs' must be in [0, 20]"},
      {R"({"prompt": "a", "logprobs": true})", "'logprobs' must be an integer"},
      {R"({"prompt": "a", "stop": 3})", "'stop' must be a string or a list of strings"},
      {R"({"prompt": "a", "stop": [""]})", "'stop' must not contain an empty string"},
      {R"({"prompt": "a", "stop_token_ids": "259"})", "'stop_token_ids' must be a list"},
      {R"({"prompt": "a", "stream": "yes"})", "'stream' must be true or false"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})",
       "'stream_options' can only be given when 'stream' is true"},
      {R"({"prompt": "a", "echo": true})", "'echo' is not supported"},
      {R"({"prompt": "a", "min_tokens": 5, "max_tokens": 2})", "'min_tokens' (5) must not exceed"},
      {R"({"prompt": "a", "model": 3})", "'model' must be a string"},
  };
  run_cases<r>(cases, parse_completion_request);
}

TEST(WireChat, ParseTable) {
  using r = chat_request;
  const std::vector<parse_case<r>> cases = {
      {R"({"messages": [{"role": "user", "content": "hi"}]})", "",
       [](const r& q) {
         ASSERT_EQ(q.messages.size(), 1U);
         EXPECT_EQ(q.messages[0], (chat_message{"user", "hi"}));
         EXPECT_TRUE(q.render.add_generation_prompt);
         EXPECT_FALSE(q.logprobs);
       }},
      {R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"},
                                                         {"type": "text", "text": "b"}]},
                        {"role": "assistant", "content": null}],
           "max_tokens": 5, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2,
           "return_token_ids": true})",
       "",
       [](const r& q) {
         EXPECT_EQ(q.messages[0], (chat_message{"system", "ab"}));
         EXPECT_EQ(q.messages[1], (chat_message{"assistant", ""}));
         EXPECT_EQ(q.sampling.max_tokens, 9);
         EXPECT_TRUE(q.logprobs);
         EXPECT_EQ(q.top_logprobs, 2);
         EXPECT_TRUE(q.return_token_ids);
       }},
      {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})", "",
       [](const r& q) {
         EXPECT_TRUE(q.render.continue_final_message);
         EXPECT_FALSE(q.render.add_generation_prompt);
       }},
      {R"({})", "'messages' is required"},
      {R"({"messages": []})", "'messages' must not be empty"},
      {R"({"messages": "hi"})", "'messages' must be a list"},
      {R"({"messages": [{"content": "hi"}]})", "'messages[0].role' is required"},
      {R"({"messages": [{"role": "wizard", "content": "hi"}]})",
       "'messages[0].role' must be one of"},
      {R"({"messages": [{"role": "user", "content": 4}]})", "'messages[0].content' must be"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "this server takes text only"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})",
       "'top_logprobs' needs 'logprobs'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true,
           "add_generation_prompt": true})",
       "cannot both be true"},
  };
  run_cases<r>(cases, parse_chat_request);
}

TEST(WireGenerate, ParseTable) {
  using r = generate_request;
  const std::vector<parse_case<r>> cases = {
      {R"({"input_ids": [1, 2], "return_logprob": true,
           "sampling_params": {"max_new_tokens": 32, "temperature": 0, "stop_token_ids": [259],
                               "skip_special_tokens": false, "no_stop_trim": true,
                               "sampling_seed": 7}})",
       "",
       [](const r& q) {
         ASSERT_EQ(q.prompts.size(), 1U);
         EXPECT_FALSE(q.batch);
         EXPECT_EQ(q.prompts[0].ids, (std::vector<token_id>{1, 2}));
         EXPECT_TRUE(q.return_logprob);
         EXPECT_EQ(q.sampling.max_tokens, 32);
         EXPECT_DOUBLE_EQ(q.sampling.temperature, 0.0);
         EXPECT_FALSE(q.sampling.skip_special_tokens);
         EXPECT_TRUE(q.sampling.include_stop_str_in_output);
         EXPECT_EQ(q.sampling.seed, 7);
       }},
      {R"({"text": "hello"})", "",
       [](const r& q) {
         EXPECT_EQ(q.prompts[0].text, "hello");
         EXPECT_EQ(q.sampling.max_tokens, 128);  // SGLang's default
       }},
      {R"({"input_ids": [[1], [2, 3]], "rid": "abc"})", "",
       [](const r& q) {
         EXPECT_TRUE(q.batch);
         EXPECT_EQ(q.prompts.size(), 2U);
         EXPECT_EQ(q.rid, "abc");
       }},
      {R"({})", "'text' or 'input_ids' is required"},
      {R"({"text": "a", "input_ids": [1]})", "not both"},
      {R"({"input_ids": []})", "'input_ids' must be a non-empty list"},
      {R"({"input_ids": [1], "sampling_params": 3})", "'sampling_params' must be an object"},
      {R"({"input_ids": [1], "sampling_params": {"top_p": 0}})",
       "'sampling_params.top_p' must be in (0, 1]"},
      {R"({"input_ids": [1], "sampling_params": {"max_new_tokens": -1}})",
       "'max_new_tokens' must be at least 0"},
  };
  run_cases<r>(cases, parse_generate_request);
}

TEST(WireControl, ParseTables) {
  run_cases<tokenize_request>(
      {
          {R"({"prompt": "ab"})", "", [](const tokenize_request& q) { EXPECT_EQ(q.prompt, "ab"); }},
          {R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": false})",
           "",
           [](const tokenize_request& q) {
             ASSERT_TRUE(q.messages.has_value());
             EXPECT_FALSE(q.render.add_generation_prompt);
           }},
          {R"({})", "exactly one of 'prompt'"},
          {R"({"prompt": "a", "messages": []})", "exactly one of 'prompt'"},
      },
      parse_tokenize_request);
  run_cases<detokenize_request>(
      {
          {R"({"tokens": [104, 105]})", "",
           [](const detokenize_request& q) { EXPECT_EQ(q.tokens.size(), 2U); }},
          {R"({})", "'tokens' is required"},
          {R"({"tokens": ["a"]})", "'tokens' must hold integer token ids"},
      },
      parse_detokenize_request);
  run_cases<weight_transfer_request>(
      {
          {R"({"update_info": {"path": "/ckpt/3"}})", "",
           [](const weight_transfer_request& q) { EXPECT_EQ((*q.info)["path"], "/ckpt/3"); }},
          {R"({"version": 3, "path": "/x"})", "Missing 'update_info' in request body"},
          {R"({"update_info": [1]})", "'update_info' must be an object"},
      },
      [](const json& body) { return parse_weight_transfer_request(body, "update_info"); });
  run_cases<finish_weight_update_request>(
      {
          {R"({})", "", [](const finish_weight_update_request& q) { EXPECT_FALSE(q.version); }},
          {R"({"weight_version": "7"})", "",
           [](const finish_weight_update_request& q) { EXPECT_EQ(q.version, 7); }},
          {R"({"weight_version": 8})", "",
           [](const finish_weight_update_request& q) { EXPECT_EQ(q.version, 8); }},
          {R"({"weight_version": "x"})", "'weight_version' must be a non-negative integer"},
      },
      parse_finish_weight_update_request);
  run_cases<disk_update_info>(
      {
          {R"({"path": "/ckpt/3"})", "",
           [](const disk_update_info& q) { EXPECT_EQ(q.path, "/ckpt/3"); }},
          {R"({"path": "ckpt/3"})", "must be a non-empty absolute folder"},
          {R"({})", "must be a non-empty absolute folder"},
      },
      parse_disk_update_info);
  run_cases<nccl_init_info>(
      {
          {R"({"master_address": "10.0.0.1", "master_port": 29500, "rank_offset": 1,
               "world_size": 3})",
           "",
           [](const nccl_init_info& q) {
             EXPECT_EQ(q.master_address, "10.0.0.1");
             EXPECT_EQ(q.master_port, 29500);
             EXPECT_EQ(q.world_size, 3);
           }},
          {R"({"master_address": "h", "master_port": 1})", "needs master_address, master_port"},
      },
      parse_nccl_init_info);
  run_cases<nccl_update_info>(
      {
          {R"({"names": ["a", "b"], "dtype_names": ["bfloat16", "float32"],
               "shapes": [[2, 3], []]})",
           "",
           [](const nccl_update_info& q) {
             EXPECT_EQ(q.names.size(), 2U);
             EXPECT_EQ(q.shapes[0], (std::vector<std::int64_t>{2, 3}));
             EXPECT_TRUE(q.shapes[1].empty());
             // What the learner sends parses back to the same.
             const auto again = parse_nccl_update_info(render_nccl_update_info(q));
             ASSERT_TRUE(again.ok());
             EXPECT_EQ(again->dtype_names, q.dtype_names);
           }},
          {R"({"names": ["a"], "dtype_names": [], "shapes": [[1]]})",
           "`dtype_names` and `shapes` should be of the same size as `names`"},
          {R"({"names": [], "dtype_names": [], "shapes": [], "packed": true})",
           "'packed': true is not served here"},
          {R"({"names": ["a"], "dtype_names": ["float32"], "shapes": [[-1]]})",
           "must hold non-negative integers"},
          // A delta: vLLM's sparse_nccl num_updates_list plus the project's fields.
          {R"({"names": ["a", "b"], "dtype_names": ["bfloat16", "bfloat16"],
               "shapes": [[4], [2]], "num_updates_list": [1, 2], "encodings": ["sparse", "full"],
               "checksums": ["00000000000000aa", "00000000000000bb"], "base_version": 6})",
           "",
           [](const nccl_update_info& q) {
             ASSERT_TRUE(q.delta);
             EXPECT_EQ(q.delta->num_updates_list, (std::vector<std::int64_t>{1, 2}));
             EXPECT_EQ(q.delta->encodings[1], "full");
             EXPECT_EQ(q.delta->base_version, 6);
             const auto again = parse_nccl_update_info(render_nccl_update_info(q));
             ASSERT_TRUE(again.ok() && again->delta);
             EXPECT_EQ(again->delta->checksums, q.delta->checksums);
             EXPECT_EQ(again->delta->base_version, 6);
           }},
          // vLLM's sparse update alone: no base, no checksums to check it by.
          {R"({"names": ["a"], "dtype_names": ["float32"], "shapes": [[4]],
               "num_updates_list": [1]})",
           "applied here only as a delta, with 'encodings', 'checksums' and 'base_version'"},
          {R"({"names": ["a"], "dtype_names": ["float32"], "shapes": [[4]],
               "num_updates_list": [1], "encodings": ["dense"], "checksums": ["x"],
               "base_version": 1})",
           "must be \"sparse\" or \"full\""},
          {R"({"names": ["a"], "dtype_names": ["float32"], "shapes": [[4]],
               "num_updates_list": [], "encodings": [], "checksums": [], "base_version": 1})",
           "should be arrays of the size of `names` (1)"},
      },
      parse_nccl_update_info);
  run_cases<update_weights_request>(
      {
          {R"({"model_path": "/m", "weight_version": "12"})", "",
           [](const update_weights_request& q) { EXPECT_EQ(q.version, 12); }},
          {R"({"model_path": "/m"})", "",
           [](const update_weights_request& q) { EXPECT_FALSE(q.version.has_value()); }},
          {R"({"weight_version": "1"})", "'model_path' is required"},
          {R"({"model_path": "/m", "weight_version": "v2"})",
           "'weight_version' must be a non-negative integer"},
      },
      parse_sglang_update_weights_request);
  run_cases<pause_request>(
      {
          {R"({})", "", [](const pause_request& q) { EXPECT_EQ(q.mode, pause_mode::abort); }},
          {R"({"mode": "retract"})", "",
           [](const pause_request& q) { EXPECT_EQ(q.mode, pause_mode::in_place); }},
          {R"({"mode": "wait"})", "",
           [](const pause_request& q) { EXPECT_EQ(q.mode, pause_mode::wait); }},
          {R"({"mode": "later"})", "'mode' must be one of abort, in_place, retract, wait"},
      },
      parse_pause_request);
}

TEST(WireBody, ParsesJsonOrSaysWhere) {
  EXPECT_TRUE(parse_json_body("").ok());
  EXPECT_TRUE(parse_json_body("  \n").value().is_object());
  const auto bad = parse_json_body("{\"prompt\": ");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("not valid JSON"), std::string::npos);
}

sequence_output sample_sequence() {
  sequence_output s;
  s.index = 0;
  s.prompt_ids = {1, 2, 3};
  s.token_ids = {'o', 'k', special::im_end};
  s.logprobs = {-0.5, -0.25, -0.125};
  s.top_logprobs = {{{'x', -2.0}}, {{'y', -3.0}}, {{'z', -4.0}}};
  s.text = "ok";
  s.finish = finish_reason::stop;
  s.eos_token = special::im_end;
  return s;
}

response_meta sample_meta() { return {"cmpl-1", 1700000000, "leap-test", 7, 0.5}; }

TEST(WireRender, CompletionShapedLikeVllm) {
  completion_request request;
  request.return_token_ids = true;
  request.logprobs = 0;
  const json out = render_completion_response(sample_meta(), {sample_sequence()}, request);
  EXPECT_EQ(out["object"], "text_completion");
  EXPECT_EQ(out["id"], "cmpl-1");
  EXPECT_EQ(out["model"], "leap-test");
  EXPECT_EQ(out["weight_version"], 7);
  const json& choice = out["choices"][0];
  EXPECT_EQ(choice["text"], "ok");
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_TRUE(choice["stop_reason"].is_null());
  EXPECT_EQ(choice["token_ids"], json::array({'o', 'k', special::im_end}));
  EXPECT_EQ(choice["prompt_token_ids"], json::array({1, 2, 3}));
  EXPECT_EQ(choice["logprobs"]["token_logprobs"], json::array({-0.5, -0.25, -0.125}));
  EXPECT_EQ(choice["logprobs"]["tokens"][2], "<|im_end|>");
  EXPECT_EQ(choice["logprobs"]["top_logprobs"][0].size(), 1U);  // logprobs: 0 -> sampled only
  EXPECT_EQ(out["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(out["usage"]["completion_tokens"], 3);
  EXPECT_EQ(out["usage"]["total_tokens"], 6);

  request.return_token_ids = false;
  request.logprobs.reset();
  request.return_tokens_as_token_ids = true;
  const json plain = render_completion_response(sample_meta(), {sample_sequence()}, request);
  EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());
}

TEST(WireRender, StopReasonAndTokenIdStrings) {
  sequence_output s = sample_sequence();
  s.eos_token.reset();
  s.stop_token = 259;
  completion_request request;
  request.logprobs = 1;
  request.return_tokens_as_token_ids = true;
  const json out = render_completion_response(sample_meta(), {s}, request);
  EXPECT_EQ(out["choices"][0]["stop_reason"], 259);
  EXPECT_EQ(out["choices"][0]["logprobs"]["tokens"][0], "token_id:111");
  // logprobs: 1 and the sampled token is the most likely: it alone (vLLM merges it into the k).
  EXPECT_EQ(out["choices"][0]["logprobs"]["top_logprobs"][0], json({{"token_id:111", -0.5}}));
  s.stop_token.reset();
  s.stop_string = "\n\n";
  EXPECT_EQ(render_completion_response(sample_meta(), {s}, request)["choices"][0]["stop_reason"],
            "\n\n");
}

TEST(WireRender, ChatShapedLikeOpenAi) {
  chat_request request;
  request.logprobs = true;
  request.top_logprobs = 1;
  request.return_token_ids = true;
  const json out = render_chat_response(sample_meta(), {sample_sequence()}, request);
  EXPECT_EQ(out["object"], "chat.completion");
  EXPECT_EQ(out["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(out["choices"][0]["message"]["content"], "ok");
  EXPECT_EQ(out["choices"][0]["logprobs"]["content"][0]["token"], "o");
  EXPECT_EQ(out["choices"][0]["logprobs"]["content"][0]["bytes"], json::array({'o'}));
  EXPECT_EQ(out["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 1U);
  EXPECT_EQ(out["choices"][0]["token_ids"].size(), 3U);
  EXPECT_EQ(out["prompt_token_ids"], json::array({1, 2, 3}));

  sequence_output delta = sample_sequence();
  delta.finish.reset();
  const json first = render_chat_chunk(sample_meta(), delta, request, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json later = render_chat_chunk(sample_meta(), delta, request, false);
  EXPECT_FALSE(later["choices"][0]["delta"].contains("role"));
  EXPECT_FALSE(later.contains("prompt_token_ids"));
  const json usage = render_usage_chunk(sample_meta(), "chat.completion.chunk", {3, 4});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
}

TEST(WireRender, GenerateShapedLikeSglang) {
  generate_request request;
  request.return_logprob = true;
  sequence_output s = sample_sequence();
  json out = render_generate_response(sample_meta(), s, request);
  EXPECT_EQ(out["text"], "ok");
  EXPECT_EQ(out["output_ids"], json::array({'o', 'k', special::im_end}));
  const json& meta = out["meta_info"];
  EXPECT_EQ(meta["finish_reason"], json({{"type", "stop"}, {"matched", special::im_end}}));
  EXPECT_EQ(meta["prompt_tokens"], 3);
  EXPECT_EQ(meta["completion_tokens"], 3);
  EXPECT_EQ(meta["weight_version"], "7");
  EXPECT_EQ(meta["output_token_logprobs"][1], json::array({-0.25, 'k', nullptr}));

  s.finish = finish_reason::length;
  EXPECT_EQ(render_generate_response(sample_meta(), s, request)["meta_info"]["finish_reason"],
            json({{"type", "length"}, {"length", 3}}));
  s.finish = finish_reason::abort;
  s.abort_message = "paused";
  EXPECT_EQ(render_generate_response(sample_meta(), s, request)["meta_info"]["finish_reason"],
            json({{"type", "abort"}, {"message", "paused"}}));
  s.finish.reset();
  EXPECT_TRUE(
      render_generate_response(sample_meta(), s, request)["meta_info"]["finish_reason"].is_null());
}

TEST(WireRender, OneErrorShape) {
  struct row {
    int status;
    const char* type;
  };
  for (const auto& r : std::vector<row>{{400, "BadRequestError"},
                                        {404, "NotFoundError"},
                                        {500, "InternalServerError"},
                                        {503, "ServiceUnavailableError"}}) {
    const json e = render_error({r.status, "why"});
    EXPECT_EQ(e["error"]["message"], "why");
    EXPECT_EQ(e["error"]["type"], r.type);
    EXPECT_EQ(e["error"]["code"], r.status);
    EXPECT_TRUE(e["error"]["param"].is_null());
  }
}

TEST(WireRender, DumpsInvalidUtf8WithoutFailing) {
  const std::string text = dump_json(json{{"text", std::string("a\xE2\x9C")}});
  EXPECT_NE(text.find("a\xEF\xBF\xBD"), std::string::npos);  // U+FFFD
}

}  // namespace
}  // namespace leap::policy
