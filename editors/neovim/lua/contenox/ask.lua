-- :ContenoxAsk — the answer streams into a floating window from `$/progress` partial
-- results; <C-c> in the window cancels the request ($/cancelRequest).
--
-- Every ask carries the current conversation id (`conversationId`), so consecutive asks
-- continue one conversation: the server puts its earlier turns into the prompt and numbers
-- the answers (`turn`). One id per Neovim instance, shared by all buffers; :ContenoxNew
-- (`new_conversation()`) starts another.
local util = require('contenox.util')
local progress = require('contenox.progress')

local M = {}

local seq = 0

--- The current conversation's id (nil until the first ask or `new_conversation()`).
---@type string?
M.conversation = nil

local function random_suffix()
  local ok, bytes = pcall(vim.uv.random, 4)
  local n = 0
  if ok and type(bytes) == 'string' and #bytes == 4 then
    for i = 1, 4 do
      n = n * 256 + bytes:byte(i)
    end
  else
    n = (vim.uv.hrtime() + vim.uv.getpid() * 7919) % 4294967296
  end
  return n
end

--- Start a new conversation: a fresh id for the following asks. Returns it.
---@return string
function M.new_conversation()
  local id
  repeat
    id = ('nvim-%d-%d'):format(os.time(), random_suffix())
  until id ~= M.conversation
  M.conversation = id
  return id
end

--- The current conversation's id (one is started when there is none).
---@return string
function M.conversation_id()
  return M.conversation or M.new_conversation()
end

---@class contenox.AskState
---@field question string
---@field token string
---@field client_id integer
---@field request_id integer?
---@field pieces string[]  partial results, in arrival order
---@field text string      what the window shows (the pieces so far, then the final text)
---@field conversation_id string  the conversation this ask belongs to
---@field turn integer?    the answer's turn in the conversation (1 for the first), once done
---@field result table?    the response {text, metrics, conversationId, turn}
---@field err table?       the error response
---@field done boolean
---@field cancelled boolean
---@field buf integer
---@field win integer

---@type contenox.AskState?
M.current = nil

local ns = vim.api.nvim_create_namespace('contenox_ask')

local function render(state, footer)
  if not vim.api.nvim_buf_is_valid(state.buf) then
    return
  end
  local lines = { '> ' .. state.question:gsub('\n', ' '), '' }
  local body = state.text ~= '' and state.text or (state.done and '' or '…')
  vim.list_extend(lines, vim.split(body, '\n', { plain = true }))
  if footer then
    vim.list_extend(lines, { '', footer })
  end
  vim.bo[state.buf].modifiable = true
  vim.api.nvim_buf_set_lines(state.buf, 0, -1, false, lines)
  vim.bo[state.buf].modifiable = false
  vim.api.nvim_buf_clear_namespace(state.buf, ns, 0, -1)
  if footer then
    vim.hl.range(state.buf, ns, 'Comment', { #lines - 1, 0 }, { #lines - 1, #lines[#lines] })
  end
  if vim.api.nvim_win_is_valid(state.win) then
    local max = math.max(5, vim.o.lines - 6)
    local height = 0
    local width = vim.api.nvim_win_get_width(state.win)
    for _, l in ipairs(lines) do
      height = height + math.max(1, math.ceil(vim.fn.strdisplaywidth(l) / width))
    end
    vim.api.nvim_win_set_height(state.win, math.min(max, math.max(height, 3)))
    pcall(vim.api.nvim_win_set_cursor, state.win, { #lines, 0 })
  end
end

--- Cancel the running ask (if any). Returns true when a request was cancelled.
---@param state? contenox.AskState
function M.cancel(state)
  state = state or M.current
  if not state or state.done then
    return false
  end
  state.done = true
  state.cancelled = true
  progress.unregister(state.client_id, state.token)
  local client = vim.lsp.get_client_by_id(state.client_id)
  if client and state.request_id then
    client:cancel_request(state.request_id)
  end
  render(state, '[cancelled]')
  return true
end

---@class contenox.AskOpts
---@field bufnr? integer    the buffer the question is about (default: current)
---@field range? {start: integer, ['end']: integer}  0-based line range (inclusive) of a selection
---@field max_tokens? integer
---@field conversation_id? string  the conversation to continue (default: the current one)
---@field outputs? {kind: string, source?: string, text: string}[]  a test run's or a terminal's output sent with the question (segment H); the definitions its traceback runs through lead the code the server shows
---@field on_done? fun(state: contenox.AskState)

--- Ask a question; returns the state (nil when there is no client).
---@param question string
---@param opts? contenox.AskOpts
---@return contenox.AskState?
function M.ask(question, opts)
  opts = opts or {}
  local bufnr = opts.bufnr or vim.api.nvim_get_current_buf()
  local client = util.require_client(bufnr)
  if not client then
    return nil
  end
  if M.current and not M.current.done then
    M.cancel(M.current)
  end
  seq = seq + 1
  local token = ('contenox-ask-%d-%d'):format(vim.uv.getpid(), seq)
  local conversation_id = opts.conversation_id or M.conversation_id()
  local params = { question = question, partialResultToken = token, conversationId = conversation_id }
  local uri = util.buf_uri(bufnr)
  if uri then
    params.textDocument = { uri = uri }
    local enc = client.offset_encoding or 'utf-16'
    if opts.range then
      local last = vim.api.nvim_buf_get_lines(bufnr, opts.range['end'], opts.range['end'] + 1, false)[1] or ''
      params.range = {
        start = { line = opts.range.start, character = 0 },
        ['end'] = { line = opts.range['end'], character = vim.str_utfindex(last, enc) },
      }
    else
      local win = vim.fn.bufwinid(bufnr)
      local pos = vim.lsp.util.make_position_params(win ~= -1 and win or 0, enc).position
      params.range = { start = pos, ['end'] = pos }
    end
  end
  if opts.max_tokens then
    params.maxTokens = opts.max_tokens
  end
  if opts.outputs and #opts.outputs > 0 then
    params.outputs = opts.outputs
  end

  local buf, win = util.float({}, {
    title = 'Contenox: Ask', filetype = 'markdown', width = math.floor(vim.o.columns * 0.6), height = 5,
  })
  ---@type contenox.AskState
  local state = {
    question = question, token = token, client_id = client.id, conversation_id = conversation_id,
    pieces = {}, text = '',
    done = false, cancelled = false, buf = buf, win = win,
  }
  M.current = state
  vim.keymap.set({ 'n', 'i' }, '<C-c>', function()
    M.cancel(state)
  end, { buffer = buf, nowait = true, desc = 'Cancel the Contenox ask' })
  vim.api.nvim_create_autocmd('BufWipeout', {
    buffer = buf,
    once = true,
    callback = function()
      if not state.done then
        M.cancel(state)
      end
    end,
  })
  render(state, '[streaming… <C-c> cancels, q closes]')

  progress.register(client.id, token, function(value)
    if state.done or type(value) ~= 'table' or type(value.text) ~= 'string' then
      return
    end
    table.insert(state.pieces, value.text)
    state.text = state.text .. value.text
    render(state, '[streaming… <C-c> cancels, q closes]')
  end)

  local ok, request_id = client:request('contenox/ask', params, function(err, result)
    progress.unregister(client.id, token)
    if state.cancelled then
      return
    end
    state.done = true
    if err then
      state.err = err
      local msg = util.describe_error(err)
      render(state, '[error] ' .. msg)
      util.error('Ask failed: ' .. msg)
    else
      state.result = result
      state.text = result.text or state.text
      local footer = util.metrics_line(result.metrics)
      if type(result.turn) == 'number' then
        state.turn = result.turn
        footer = 'turn ' .. result.turn .. (footer ~= '' and (' · ' .. footer) or '')
        if vim.api.nvim_win_is_valid(state.win) then
          pcall(vim.api.nvim_win_set_config, state.win,
            { title = (' Contenox: Ask · turn %d '):format(result.turn), title_pos = 'center' })
        end
      end
      render(state, '[' .. footer .. ']')
    end
    require('contenox.status').refresh()
    if opts.on_done then
      opts.on_done(state)
    end
  end, bufnr)
  if not ok then
    state.done = true
    progress.unregister(client.id, token)
    render(state, '[error] the language server is not running')
    util.error('Ask failed: the language server is not running')
    return state
  end
  state.request_id = request_id
  return state
end

return M
