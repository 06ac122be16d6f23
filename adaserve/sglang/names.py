"""The names the plugin and its readers share: the algorithm, the SGLang version it is
built against, and the SGLang functions it hooks. A module of constants, importing
nothing, so that ``slo`` (read by the HTTP hooks), ``check`` and ``plugin`` (which imports
every hook) all take them from here without importing each other."""

ALGORITHM = "ADASERVE"
SGLANG_VERSION = "0.5.23"
ORGANIZE = "sglang.srt.speculative.eagle_utils.organize_draft_results"
GENERATE = "sglang.srt.entrypoints.http_server.serve_generate_request"
SERVE = "sglang.srt.entrypoints.http_server._setup_and_run_http_server"
WARMUP = "sglang.srt.entrypoints.http_server._wait_and_warmup"
OPENAI = "sglang.srt.entrypoints.openai.serving_base.OpenAIServingBase.handle_request"
REPORT = "sglang.srt.managers.tokenizer_manager.TokenizerManager._calculate_spec_decoding_metrics"
HIDDEN = "sglang.srt.speculative.spec_utils.spec_need_hidden_states"
TRITON_METADATA = ("sglang.srt.layers.attention.triton_backend.TritonAttnBackend"
                   ".init_forward_metadata")
CHAT_RESPONSE = ("sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat"
                 "._build_chat_response")
COMPLETION_RESPONSE = ("sglang.srt.entrypoints.openai.serving_completions"
                       ".OpenAIServingCompletion._build_completion_response")
SERVER_INFO = "sglang.srt.utils.common.build_server_info"
CHAT_STREAM = ("sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat"
               "._generate_chat_stream")
COMPLETION_STREAM = ("sglang.srt.entrypoints.openai.serving_completions"
                     ".OpenAIServingCompletion._generate_completion_stream")
CALC_PRIORITY = "sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority"
DEFER_PREFILL = "sglang.srt.managers.scheduler.Scheduler._should_defer_prefill"
QUEUED_LIMIT = "sglang.srt.managers.scheduler.Scheduler._abort_on_queued_limit"
ALLOCATABLE = "sglang.srt.managers.scheduler.Scheduler.get_num_allocatable_reqs"
RESOLVED = "sglang.srt.arg_groups.overrides.resolution_result"
