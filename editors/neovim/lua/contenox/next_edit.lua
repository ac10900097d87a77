-- Next-edit suggestions for Neovim 0.11 from the server's contenox/nextEdit
-- (contenox_lsp/PROTOCOL.md, "contenox/nextEdit").
--
-- After an edit settles (leaving insert mode, or a change in normal mode) the plugin asks for
-- the developer's likely next change. A suggestion is drawn with extmarks: the text it
-- replaces highlighted as removed, the new text as virtual text after it (further lines as
-- virtual lines), a sign in the sign column. <Tab> in normal mode jumps to it; <Tab> again, on
-- its line, applies it; <C-]> or leaving the buffer dismisses it. Both keys fall through to
-- their usual action when nothing is shown.
local util = require('contenox.util')

local M = {}

M.ns = vim.api.nvim_create_namespace('contenox_next_edit')

---@class contenox.NextEditConfig
---@field enabled? boolean      ask after edits settle (default true)
---@field debounce_ms? integer  quiet time after an edit before a request (default 400)
---@field jump_key? string      normal-mode key: jump to the suggestion, then apply it (default <Tab>)
---@field dismiss_key? string   normal-mode key that dismisses it (default <C-]>)
---@field sign? string          sign column text (default '»')
M.config = { enabled = true, debounce_ms = 400, jump_key = '<Tab>', dismiss_key = '<C-]>',
  sign = '»' }

--- The suggestion shown right now: { bufnr, edit, client_id, row, col, end_row, end_col }
--- (rows and byte columns, 0-based, of the range it replaces).
M.current = nil
--- The last answer of the server, for tests and :lua inspection: { edits = {...} }.
M.last_result = nil
local debounce = util.debouncer()
local pending = util.request_slot()

local function clear()
  if M.current then
    pcall(vim.api.nvim_buf_clear_namespace, M.current.bufnr, M.ns, 0, -1)
  end
  M.current = nil
end

--- The byte column of the client's position `col` (in `encoding` units) on `row`.
local function byte_col(bufnr, row, col, encoding)
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
  local ok, b = pcall(vim.str_byteindex, line, encoding, col, false)
  return ok and math.min(b, #line) or math.min(col, #line)
end

--- Draw `edit` (one item of the server's `edits`) in `bufnr`.
function M.show(bufnr, edit, client)
  clear()
  local enc = client.offset_encoding or 'utf-16'
  local r = edit.range
  local row, end_row = r.start.line, r['end'].line
  local col = byte_col(bufnr, row, r.start.character, enc)
  local end_col = byte_col(bufnr, end_row, r['end'].character, enc)
  local lines = vim.split(edit.text or '', '\n', { plain = true })
  if row ~= end_row or col ~= end_col then -- the text it replaces, struck through
    vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, {
      end_row = end_row, end_col = end_col, hl_group = 'DiffDelete', strict = false,
    })
  end
  local opts = { sign_text = M.config.sign, sign_hl_group = 'DiffChange', strict = false }
  if lines[1] ~= '' then
    opts.virt_text = { { lines[1], 'DiffAdd' } }
    opts.virt_text_pos = 'inline'
  end
  opts.virt_lines = util.virt_lines(lines, 'DiffAdd')
  vim.api.nvim_buf_set_extmark(bufnr, M.ns, end_row, end_col, opts)
  M.current = { bufnr = bufnr, edit = edit, client_id = client.id, row = row, col = col,
    end_row = end_row, end_col = end_col }
  -- Copilot's notification: the server counts what was actually shown.
  client:notify('textDocument/didShowInlineEdit', { item = edit })
end

--- Ask the server for the next edit at the cursor of the current buffer.
function M.request()
  local bufnr = vim.api.nvim_get_current_buf()
  local client = util.client(bufnr)
  if not client then
    return
  end
  pending.cancel()
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.textDocument.version = vim.lsp.util.buf_versions[bufnr]
  params.context = { triggerKind = 2 }
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local ok, id = client:request('contenox/nextEdit', params, function(err, result)
    pending.done()
    if err or type(result) ~= 'table' then
      return
    end
    M.last_result = result
    -- Drop an answer to a buffer state the user has already left.
    if vim.api.nvim_buf_get_changedtick(bufnr) ~= tick or not vim.api.nvim_buf_is_valid(bufnr) then
      return
    end
    local edit = (result.edits or {})[1]
    if type(edit) == 'table' and type(edit.text) == 'string' and type(edit.range) == 'table' then
      M.show(bufnr, edit, client)
    end
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

--- Move the cursor to the suggestion; true when there was one.
function M.jump()
  local cur = M.current
  if not cur or vim.api.nvim_get_current_buf() ~= cur.bufnr then
    return false
  end
  vim.api.nvim_win_set_cursor(0, { cur.row + 1, cur.col })
  return true
end

--- Apply the suggestion; true when there was one.
function M.accept()
  local cur = M.current
  if not cur then
    return false
  end
  clear()
  local client = vim.lsp.get_client_by_id(cur.client_id)
  if not client then
    return false
  end
  vim.lsp.util.apply_text_edits({ { range = cur.edit.range, newText = cur.edit.text } },
    cur.bufnr, client.offset_encoding)
  if cur.edit.command then
    client:exec_cmd(cur.edit.command, { bufnr = cur.bufnr })
  end
  return true
end

--- Hide the suggestion and tell the server it was not taken.
function M.dismiss()
  pending.cancel()
  local cur = M.current
  clear()
  if not cur then
    return false
  end
  local client = vim.lsp.get_client_by_id(cur.client_id)
  local args = cur.edit.command and cur.edit.command.arguments
  if client and args then
    client:exec_cmd({ title = 'Reject next edit', command = 'contenox.rejectNextEdit',
      arguments = args }, { bufnr = cur.bufnr })
  end
  return true
end

--- <Tab>: jump to the suggestion, or apply it when the cursor is on its first line.
function M.tab()
  local cur = M.current
  if not cur or vim.api.nvim_get_current_buf() ~= cur.bufnr then
    return false
  end
  if vim.api.nvim_win_get_cursor(0)[1] - 1 == cur.row then
    return M.accept()
  end
  return M.jump()
end

--- Enable next-edit suggestions (called by require('contenox').setup{ next_edit = {...} }).
---@param opts? contenox.NextEditConfig
function M.setup(opts)
  M.config = vim.tbl_extend('force', M.config, opts or {})
  local group = vim.api.nvim_create_augroup('contenox_next_edit', { clear = true })
  if not M.config.enabled then
    return
  end
  vim.api.nvim_create_autocmd({ 'InsertLeave', 'TextChanged' }, {
    group = group,
    callback = schedule_request,
  })
  vim.api.nvim_create_autocmd('BufLeave', { group = group, callback = M.dismiss })
  local function shown() return M.current ~= nil end
  util.fallthrough_map('n', M.config.jump_key, shown, M.tab, 'contenox: next edit')
  util.fallthrough_map('n', M.config.dismiss_key, shown, M.dismiss, 'contenox: next edit')
end

return M
