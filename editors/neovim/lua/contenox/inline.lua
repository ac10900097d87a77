-- Inline completion (ghost text) for Neovim 0.11, from the server's
-- textDocument/inlineCompletion (contenox_lsp/PROTOCOL.md, "Inline completion").
--
-- Neovim 0.12+ has vim.lsp.inline_completion built in: there this module only enables it.
-- On 0.11 it requests completions itself, debounced in insert mode, draws the suggestion
-- with an extmark, accepts it with a key (default <Tab>, falling through to the key's usual
-- action when nothing is shown) and dismisses it on <C-]> and on leaving insert mode.
local util = require('contenox.util')

local M = {}

M.ns = vim.api.nvim_create_namespace('contenox_inline')

---@class contenox.InlineConfig
---@field enabled? boolean      request completions in insert mode (default true)
---@field debounce_ms? integer  quiet time after a keystroke before a request (default 200)
---@field accept_key? string    insert-mode key that accepts the suggestion (default <Tab>)
---@field dismiss_key? string   insert-mode key that dismisses it (default <C-]>)
M.config = { enabled = true, debounce_ms = 200, accept_key = '<Tab>', dismiss_key = '<C-]>' }

--- The suggestion shown right now: { bufnr, row, col, text, item, client_id }.
M.current = nil
local debounce = util.debouncer()
local pending = util.request_slot()

local function clear()
  if M.current then
    pcall(vim.api.nvim_buf_clear_namespace, M.current.bufnr, M.ns, 0, -1)
  end
  M.current = nil
end

--- Draw `text` as ghost text at the cursor (first line inline, the rest as virtual lines).
local function show(bufnr, row, col, text, item, client_id)
  clear()
  local lines = vim.split(text, '\n', { plain = true })
  local opts = {
    virt_text = { { lines[1], 'Comment' } },
    virt_text_pos = 'inline',
    hl_mode = 'combine',
  }
  opts.virt_lines = util.virt_lines(lines, 'Comment')
  vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, opts)
  M.current = { bufnr = bufnr, row = row, col = col, text = text, item = item,
    client_id = client_id }
end

--- Ask the server for a completion at the cursor of the current buffer.
function M.request()
  local bufnr = vim.api.nvim_get_current_buf()
  local client = util.client(bufnr)
  if not client or vim.fn.mode() ~= 'i' then
    return
  end
  pending.cancel()
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.textDocument.version = vim.lsp.util.buf_versions[bufnr]
  params.context = { triggerKind = 2 }
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local cursor = vim.api.nvim_win_get_cursor(0)
  local ok, id = client:request('textDocument/inlineCompletion', params, function(err, result)
    pending.done()
    if err or not result or not result.items or #result.items == 0 then
      return
    end
    -- Drop an answer to a buffer state the user has already left.
    if vim.api.nvim_get_current_buf() ~= bufnr or vim.fn.mode() ~= 'i'
        or vim.api.nvim_buf_get_changedtick(bufnr) ~= tick
        or not vim.deep_equal(vim.api.nvim_win_get_cursor(0), cursor) then
      return
    end
    local item = result.items[1]
    if type(item.insertText) ~= 'string' or item.insertText == '' then
      return
    end
    show(bufnr, cursor[1] - 1, cursor[2], item.insertText, item, client.id)
  end, bufnr)
  if ok and id then
    pending.set(client, id)
  end
end

local function schedule_request()
  clear()
  if not M.config.enabled then
    return
  end
  debounce.schedule(M.config.debounce_ms, M.request)
end

--- Insert the shown suggestion at the cursor; true when there was one.
function M.accept()
  local cur = M.current
  if not cur then
    return false
  end
  clear()
  local lines = vim.split(cur.text, '\n', { plain = true })
  vim.api.nvim_buf_set_text(cur.bufnr, cur.row, cur.col, cur.row, cur.col, lines)
  local last_row = cur.row + #lines - 1
  local last_col = (#lines == 1 and cur.col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { last_row + 1, last_col })
  local client = vim.lsp.get_client_by_id(cur.client_id)
  if client and cur.item.command then
    client:exec_cmd(cur.item.command, { bufnr = cur.bufnr })
  end
  return true
end

function M.dismiss()
  pending.cancel()
  clear()
end

--- Enable inline completion (called by require('contenox').setup{ inline = {...} }).
---@param opts? contenox.InlineConfig
function M.setup(opts)
  M.config = vim.tbl_extend('force', M.config, opts or {})
  if not M.config.enabled then
    return
  end
  if vim.lsp.inline_completion ~= nil then
    vim.lsp.inline_completion.enable(true) -- Neovim 0.12+: the built-in client does it all
    return
  end
  local group = vim.api.nvim_create_augroup('contenox_inline', { clear = true })
  vim.api.nvim_create_autocmd({ 'TextChangedI', 'TextChangedP' }, {
    group = group,
    callback = schedule_request,
  })
  vim.api.nvim_create_autocmd({ 'InsertLeave', 'BufLeave' }, {
    group = group,
    callback = M.dismiss,
  })
  local function shown() return M.current ~= nil end
  util.fallthrough_map('i', M.config.accept_key, shown, M.accept, 'contenox: accept the suggestion')
  vim.keymap.set('i', M.config.dismiss_key, M.dismiss, { desc = 'contenox: dismiss the suggestion' })
end

return M
