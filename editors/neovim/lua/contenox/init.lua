-- Contenox for Neovim >= 0.11: `require('contenox').setup{...}`.
--
-- Everything here talks to `contenox-lsp` through its public contract (standard LSP plus the
-- contenox/* requests, see contenox_lsp/PROTOCOL.md); nothing the server computes is
-- recomputed in the editor.
local util = require('contenox.util')
local status = require('contenox.status')

local M = {}

--- Why the server could not be started (shown again when a command needs it).
M.start_error = nil ---@type string?

---@class contenox.Config
---@field cmd? string[]            server command (default: $CONTENOX_LSP_COMMAND, else { 'contenox-lsp' })
---@field filetypes? string[]      filetypes to attach to (default: lsp/contenox.lua's list)
---@field profile? string          engine profile TOML
---@field model? string            GGUF model path override
---@field debounce_ms? integer     quiet time after an edit before re-assembly / pre-prefill
---@field prefill_on_idle? boolean pre-prefill the prompt while idle
---@field max_tokens? integer      default answer length
---@field log_level? string        server log level (debug, info, warning, error)
---@field init_options? table      raw initializationOptions (merged last)
---@field status_interval_ms? integer how often the statusline polls contenox/status (0 = never)
---@field enable? boolean          call vim.lsp.enable('contenox') (default true)
---@field inline? contenox.InlineConfig|false  inline completion (ghost text); false = off
---@field next_edit? contenox.NextEditConfig|false  next-edit suggestions; false = off
M.defaults = {
  cmd = nil,
  filetypes = nil,
  init_options = {},
  status_interval_ms = 2000,
  enable = true,
}

M.config = vim.deepcopy(M.defaults)

local function default_cmd()
  local env = vim.env.CONTENOX_LSP_COMMAND
  if env and vim.trim(env) ~= '' then
    return vim.split(vim.trim(env), '%s+')
  end
  return { 'contenox-lsp' }
end

local function init_options(cfg)
  local o = {}
  local map = {
    profile = 'profile', model = 'model', debounce_ms = 'debounceMs',
    prefill_on_idle = 'prefillOnIdle', max_tokens = 'maxTokens', log_level = 'logLevel',
  }
  for k, key in pairs(map) do
    if cfg[k] ~= nil then
      o[key] = cfg[k]
    end
  end
  return vim.tbl_extend('force', o, cfg.init_options or {})
end

local augroup = vim.api.nvim_create_augroup('contenox', { clear = true })

--- Configure and enable the Contenox language server. Returns false (after an actionable
--- error message) when the server command is not executable.
---@param opts? contenox.Config
---@return boolean
function M.setup(opts)
  if vim.fn.has('nvim-0.11') == 0 then
    util.error('Neovim 0.11 or newer is required.')
    return false
  end
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  local cfg = M.config
  local cmd = cfg.cmd or default_cmd()
  cfg.cmd = cmd
  status.interval_ms = cfg.status_interval_ms or 2000

  if vim.fn.executable(cmd[1]) ~= 1 then
    M.start_error = ('the language server `%s` was not found or is not executable. Install it '
      .. '(`pip install contenox-lsp`, or start Neovim with its virtual environment active), or '
      .. "pass its path: require('contenox').setup{ cmd = { '/path/to/contenox-lsp' } }. "
      .. 'See :checkhealth contenox.'):format(cmd[1])
    util.error(M.start_error)
    return false
  end
  M.start_error = nil

  local lsp_cfg = { cmd = cmd, init_options = init_options(cfg) }
  if cfg.filetypes then
    lsp_cfg.filetypes = cfg.filetypes
  end
  vim.lsp.config('contenox', lsp_cfg)

  vim.api.nvim_clear_autocmds({ group = augroup })
  vim.api.nvim_create_autocmd('LspAttach', {
    group = augroup,
    callback = function(ev)
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      if client and client.name == util.name then
        status.start()
      end
    end,
  })
  if cfg.enable ~= false then
    vim.lsp.enable('contenox')
  end
  if cfg.inline ~= false then
    require('contenox.inline').setup(cfg.inline or {})
  end
  if cfg.next_edit ~= false then
    require('contenox.next_edit').setup(cfg.next_edit or {})
  end
  return true
end

--- :ContenoxAsk
---@param question string
---@param opts? contenox.AskOpts
function M.ask(question, opts)
  return require('contenox.ask').ask(question, opts)
end

--- :ContenoxNew — start a new conversation (a new id for the following asks); with a
--- question, ask it in the new conversation. Returns the ask's state when one was started.
---@param question? string
---@param opts? contenox.AskOpts
---@return contenox.AskState?
function M.new_conversation(question, opts)
  local ask = require('contenox.ask')
  local id = ask.new_conversation()
  if question and vim.trim(question) ~= '' then
    return ask.ask(question, vim.tbl_extend('force', opts or {}, { conversation_id = id }))
  end
  util.notify('new conversation started; :ContenoxAsk continues it')
  return nil
end

--- The id of the current conversation (sent as `conversationId` with every ask).
---@return string
function M.conversation_id()
  return require('contenox.ask').conversation_id()
end

--- Cancel the running ask.
function M.cancel()
  return require('contenox.ask').cancel()
end

--- :ContenoxExplainContext
function M.explain_context(opts)
  return require('contenox.explain').show(opts)
end

--- :ContenoxStatus
function M.show_status(opts)
  return status.show(opts)
end

--- The statusline component (see :h contenox-statusline in the README).
function M.statusline()
  return status.statusline()
end

local function pin_params(bufnr, range)
  local uri = util.buf_uri(bufnr)
  if not uri then
    util.error('this buffer is not a file; open a file inside the workspace to pin it.')
    return nil
  end
  local params = { uri = uri }
  if range then
    -- Whole lines: from the start of the first to the end of the last (LSP ends are exclusive).
    local client = util.client(bufnr)
    local last = vim.api.nvim_buf_get_lines(bufnr, range[2] - 1, range[2], false)[1] or ''
    params.range = {
      start = { line = range[1] - 1, character = 0 },
      ['end'] = { line = range[2] - 1, character = vim.str_utfindex(last, client and client.offset_encoding or 'utf-16') },
    }
  end
  return params
end

--- :ContenoxPin — pin the current file (or the given 1-based line range) into the context.
---@param opts? {bufnr?: integer, range?: integer[], cb?: fun(err: any, result: table?)}
function M.pin(opts)
  opts = opts or {}
  local bufnr = opts.bufnr or vim.api.nvim_get_current_buf()
  local client = util.require_client(bufnr)
  local params = client and pin_params(bufnr, opts.range)
  if not client or not params then
    return
  end
  client:request('contenox/pin', params, function(err, r)
    if err then
      util.error('Pin failed: ' .. util.describe_error(err))
    elseif r.pinned then
      local tokens = type(r.pin.tokens) == 'number' and (' (' .. r.pin.tokens .. ' tokens)') or ''
      util.notify('pinned ' .. r.pin.label .. tokens)
    else
      util.notify(r.pin.label .. ' is already pinned')
    end
    status.refresh()
    if opts.cb then
      opts.cb(err, r)
    end
  end, bufnr)
end

--- :ContenoxUnpin — remove the current file's pins (or those of the given line range).
---@param opts? {bufnr?: integer, range?: integer[], cb?: fun(err: any, result: table?)}
function M.unpin(opts)
  opts = opts or {}
  local bufnr = opts.bufnr or vim.api.nvim_get_current_buf()
  local client = util.require_client(bufnr)
  local params = client and pin_params(bufnr, opts.range)
  if not client or not params then
    return
  end
  client:request('contenox/unpin', params, function(err, r)
    if err then
      util.error('Unpin failed: ' .. util.describe_error(err))
    else
      util.notify(r.removed > 0 and ('removed ' .. r.removed .. ' pin' .. (r.removed == 1 and '' or 's'))
        or 'this file was not pinned')
    end
    status.refresh()
    if opts.cb then
      opts.cb(err, r)
    end
  end, bufnr)
end

return M
