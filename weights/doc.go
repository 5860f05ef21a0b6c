// Package weights prices requests to metered APIs before they run and reads
// what they actually cost afterwards, so an admission controller can reserve
// weighted permits and then reconcile them.
//
// # Before the call
//
// An [Estimator] parses the body of an OpenAI-compatible request
// (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses)
// or of Anthropic's Messages API (/v1/messages) and
// returns an [Estimate]: prompt tokens, an output reservation, and, with a
// [Prices] table, a cost in micro-dollars.
//
// Prompt tokens are counted with the model's own tokenizer: o200k_base for
// the gpt-4o, gpt-4.1, gpt-4.5, gpt-5 and o-series families, cl100k_base for
// gpt-4, gpt-3.5-turbo and the text-embedding-3 and ada-002 models (see
// [ModelRule] to add families, set a default encoding, or estimate a model
// without a public tokenizer from a calibrated characters-per-token ratio,
// or from a public encoding's count times a measured factor).
// The chat format adds the fixed costs published in OpenAI's cookbook ("How
// to count tokens with tiktoken"): 3 tokens per message, 1 per name, 3 to
// prime the reply, and the cookbook's formula for tool definitions. With
// these, the estimate reproduces the API's prompt_tokens for the cookbook's
// examples exactly (129 and 124 tokens for its chat example, 105 and 101 for
// its tool example, with cl100k_base and o200k_base). Images are priced with
// OpenAI's tile formula ([ImageCost]); content this package does not model
// (audio, files, encrypted reasoning, built-in tools) at one token per four
// bytes of its JSON. The Responses API's instructions and input messages
// are priced like chat messages. Items stored upstream
// (previous_response_id, item_reference) cannot be seen and are left to the
// settlement.
//
// The output reservation is the request's max_completion_tokens,
// max_tokens or max_output_tokens, else the model's default
// ([ModelRule.MaxOutputTokens], [Config.DefaultMaxOutputTokens]; 16 on the
// legacy completions endpoint, as in the API), times n (or best_of) and the
// number of prompts.
//
// # Anthropic's Messages API
//
// A POST /v1/messages body ([EndpointMessages]) is read by the same walker
// under the same rules: the system prompt (a string or text blocks) and
// every message, a string or content blocks — text, thinking, tool_use
// (its name and input's JSON text), tool_result (its content, blocks
// included), image (Anthropic's formula, width × height / 750 after
// fitting 1568 pixels, at most 1,600: [ClaudeImageTokens]), document
// (plain text and content sources as text, a base64 PDF at 4,600 tokens
// per page found in the file) — and tools (name, description and input
// schema's JSON text, plus the 346-token tool-use system prompt the API
// adds); other blocks and server tools by size. max_tokens is required
// and is the output reservation, as Anthropic's output limit reserves
// it; the fields of OpenAI's APIs (n, max_completion_tokens) mean
// nothing here. Message overheads are the chat format's.
//
// Claude's tokenizer is not public: Claude text is counted with
// cl100k_base and the count multiplied by 1.2 ([ModelRule].TokenScale).
// Against the last tokenizer Anthropic published, on 24 texts of English,
// five other languages and code, cl100k_base × 1.05 is within 0.5% in
// total and 5.2% per text on average; for Claude 3 and later Anthropic
// says OpenAI's tokenizers count 15 to 20% fewer tokens than Claude's,
// hence 1.2, which overcounts the older tokenizer by 14.7% and undercounts
// no text by more than 7.5%. The settlement charges the exact usage.
//
// Anthropic's usage leaves the cache out of input_tokens; [ReadUsage]
// adds cache_creation_input_tokens and cache_read_input_tokens into
// [Usage].InputTokens, as the other APIs count them, and keeps them as
// CacheWriteInputTokens and CachedInputTokens; the writes to a one-hour
// cache (cache_creation.ephemeral_1h_input_tokens, or the entries of
// Bedrock's cacheDetails with a ttl of "1h") are CacheWrite1hInputTokens,
// which [Price.CostMicros] charges at the one-hour price. [Usage.Units] and
// [Estimate.Units] split tokens into the units providers limit:
// input_tokens (not read from the cache: Anthropic's input limit),
// cached_input_tokens and output_tokens (reasoning included).
//
// # The Gemini API
//
// A generateContent body ([EndpointGenerateContent]) names no model: its
// path does, and [Estimator.EstimateModel] takes it. The walker reads
// contents (each a message of the chat format: its role and the text of
// its parts; a function call or response as its name and JSON text),
// systemInstruction, tools (function declarations as their JSON text,
// other tools by size) and generationConfig's maxOutputTokens and
// candidateCount (the reservation, as max_tokens and n are), in either
// of the spellings the API accepts (systemInstruction or
// system_instruction); a member spelled both ways, or in another case, is
// refused. Inline data is an image of Gemini's tiles
// ([GeminiImageTokens]) when its header tells its size, else priced by
// size at one token per four bytes of base64, above what Google bills
// for any medium. A cachedContent or a fileData part is refused: what it
// holds is upstream and can exceed what the settlement accepts as
// plausible. Gemini's tokenizer is not public: text is counted with
// o200k_base. [ReadUsage] and the [StreamReader] read usageMetadata:
// promptTokenCount (cached content included) plus
// toolUsePromptTokenCount is the prompt, candidatesTokenCount plus
// thoughtsTokenCount the output, cachedContentTokenCount the cached part;
// a stream is complete at a candidate's finishReason.
//
// # Amazon Bedrock's Converse API
//
// A Converse body ([EndpointConverse]) names no model either: its path's
// model id does ([Estimator.EstimateModel]); a Bedrock id names Claude's
// tokenizer as Anthropic's names do, and [Prices.Resolve] prices it as
// its provider's own model ([BedrockModel]: the region group, the
// provider and the version taken off). The walker reads messages (each
// a message of the chat format: its role and its content blocks),
// system, toolConfig.tools and inferenceConfig.maxTokens (the
// reservation): text as text, an image by [ClaudeImageTokens], a PDF by
// its pages, tool calls and results as their text, other blocks by
// size; content in S3 is refused. [ReadUsage] reads the usage in its
// lowerCamelCase spelling, whose inputTokens leaves the cache out, as
// Anthropic's does; a [StreamReader] with [StreamConfig].EventStream reads
// a ConverseStream's AWS event-stream messages (checked, bounded) for
// their text and the metadata event's usage.
//
// # Objects stored upstream
//
// A body can name by id what the provider keeps in the caller's account:
// a file (a chat file part's file.file_id, a Responses input_file or
// input_image, in the input, a prompt's variables or a computer
// screenshot, a code_interpreter container's file_ids, an
// image_generation tool's mask, a Messages source or container_upload),
// an item of a stored response (item_reference, a reasoning item by id
// without its encrypted_content), a file_search tool's vector stores,
// the audio of an earlier chat completion (audio.id), a stored prompt
// template (prompt.id), a code execution container or a custom skill
// (see [RefKind]). Their size is not in the estimate (a file part is priced by
// the size of its reference), and the provider reads them for whoever
// names them: [Estimate.Refs] lists them ([Ref]: kind, field path, id),
// so that a caller serving several tenants from one account checks
// they are the requesting tenant's own, and prices what it knows of
// them. A body naming more than [MaxRefs] is refused.
//
// # Large bodies
//
// A body above [Config.MaxBodyBytes] is refused with a [*BodyTooLargeError]
// before anything is parsed (an HTTP caller answers 413; [Estimator.ReadBody]
// stops reading at the cap). Malformed JSON or a field of the wrong type is
// a [*MalformedError] matching [ErrMalformed] (answer 400); nothing panics on
// input. When a request's text exceeds [Config.SampleThreshold] (64 KiB by
// default) its tokens are estimated from 8 KiB of samples: eight windows,
// aligned to white space, spread evenly over the text (in the order the
// body gives it). Their token count is
// scaled to the whole text by a cheap proxy (words, digit groups,
// punctuation and non-ASCII characters, counted over all of it), whose ratio
// to tokens varies far less between languages and code than bytes per token
// does. Measured on 24 texts of 70 to 256 KiB each (four sizes, six
// paragraph orders): English chat text is within 1.43% of the exact count
// (0.58% on average; 0.70% for the 256 KiB benchmark request), text mixing
// six languages with code, JSON and SQL within 2.81% (1.32% on average).
// The tests hold the method to 2% on English and 4% on mixed text. On 256 KiB
// it takes about a sixteenth of the CPU time of tokenising everything
// (BenchmarkEstimateChat against BenchmarkPeerTiktokenEncode, cpu-ns/op).
// Text the proxy does not see (white space only) is scaled by size instead.
// Below the threshold the count is exact.
//
// Text reaches the tokenizer in chunks of at most 1 KiB, cut where the
// tokenizer splits anyway (before a space that follows a non-space), so the
// count stays exact. This bounds the cost of hostile input: tiktoken-go's
// merge is quadratic in the length of one pre-tokenised piece, and 64 KiB of
// a single repeated letter took 6.6 s to count in one call; chunked, it costs
// two to three times as much as 64 KiB of English (a run with no space to
// cut at is cut at a character boundary, which can add one token per KiB).
//
// # Reading the body
//
// The body is read in one pass by the module's strict JSON scanner
// (internal/jsonscan, fuzzed against encoding/json): it accepts what
// encoding/json accepts (invalid UTF-8 inside a string is counted as
// U+FFFD; nesting is limited to 10,000 levels) and nothing else. The request
// is never decoded into a tree: its text goes to the tokenizer piece by
// piece. Below the sampling threshold a copy of the text, at most the
// threshold's size, is kept until the model is known; above it, a second
// pass over the body feeds the sampler. The memory used beyond the body
// therefore does not grow with the number of messages: pricing an 8 MB
// body of 500,000 messages allocates about 0.34 MB (TestEstimateMemory),
// where decoding it with encoding/json allocated 446 MB.
//
// Keys are matched case-sensitively, as the OpenAI API matches them. A body
// is refused with a [*MalformedError] naming the field when an object the
// estimate reads (the request, a message, a content part and its
// image_url, a tool call, a tool or function definition, its parameters and
// their properties, stream_options, response_format, text.format) repeats
// a key, escapes decoded ("max\u005ftokens" is max_tokens), or has a key
// that is one of its fields under Unicode case folding without being it
// ("MAX_TOKENS", "Model", "ſtream"). Upstreams differ on which of two keys
// they keep and some match keys case-insensitively, so such a body could be
// read upstream as another request than the one priced: this package
// refuses it rather than guess. JSON Schema keywords are case-sensitive, so
// inside parameters only repeats are refused. Objects the estimate does not
// read (metadata, nested schemas) are not checked. An object it reads may
// have at most 1,024 members.
//
// Integer fields (max_tokens, max_completion_tokens, max_output_tokens, n,
// best_of, token ids) accept any JSON form of an integer (3000, 3e3,
// 3000.0); a value with a fraction is refused, and so is a negative limit
// (n and best_of must be at least 1). JSON sets no bound on a number, so
// 1e400 is a valid, very large max_tokens. Every figure of an estimate, and
// every sum and product it is made of, saturates at [MaxTokens] (2^50, the
// bound of limits.MaxAmount): a request for 9223372036854775807 output
// tokens, or for 1e30 with n = 128, reserves MaxTokens, never a wrapped or
// negative amount.
//
// # After the call
//
// [ReadUsage] reads the usage object of a JSON response in any of the
// APIs' shapes. A [StreamReader] wraps a server-sent-events response
// (Anthropic's too: message_start reports the prompt, message_delta the
// output so far): it
// passes the bytes through unchanged, picks up the final usage report, and,
// when none arrives (a cut stream, an upstream that ignores the option),
// counts the streamed text with the tokenizer. An event too large to read
// ([DefaultMaxEventBytes]) is passed through unread: its text cannot be
// counted and a report in it is lost, so the stream is charged at least
// its reservation ([StreamResult].Unread), whether a report follows it or
// not (one of more is charged as reported).
// [InjectIncludeUsage] asks the upstream for that report on requests that
// did not, and [StreamConfig.StripUsage] removes the extra chunk from what
// the client sees.
//
// Upstream usage is untrusted input. Counts are read in every JSON number
// form (1000, 1e3, 1000.0) and a bad one never fails the response;
// [Estimate.CheckUsage] (and [StreamResult] for streams) then bounds the
// report by the request: the prompt at most four times the estimate plus
// [UsageSlack] (and not zero), the completion at most the reservation plus
// UsageSlack (and, in a stream, not far below the streamed text). A count that is missing, malformed, negative or out of
// range is charged as reserved, never as nothing, and the reason is
// returned as a [UsageFallback] for a metric.
//
// # Other prices
//
// [OperationCosts] prices calls of non-LLM APIs by route and method (an
// export costs 50 units, a lookup 1). [Prices] turns tokens into
// micro-dollars, so a policy can cap a tenant's spend: [NewPriceTable]
// starts from the built-in list prices ([DefaultPrices]), prices
// fine-tuned "ft:" models as their base, and gives a model without a price
// a fallback price or reports it unpriced ([Prices.Resolve]), so that the
// caller refuses it rather than serve it for free.
//
// # Tokenizers
//
// Counting goes through the [Counter] interface, one per [Encoding]. The
// default source is [BPECounter] (package weights/bpe): an exact
// reimplementation of the o200k_base and cl100k_base encodings, proven
// token for token against tiktoken-go by differential and fuzz tests, that
// counts without allocating at 20 to 60 times tiktoken-go's speed and loads
// o200k_base in about 12 ms. [TiktokenCounter] (github.com/pkoukk/tiktoken-go
// with the ranks embedded by its offline loader: nothing is downloaded; each
// encoding loads once per process, in about 60 ms for cl100k_base and
// 160 ms for o200k_base) stays available as the reference; set
// [Config.Counters] to use it, or any other exact counter.
package weights
