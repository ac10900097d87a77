-- A missing or broken server gives actionable messages, never a Lua error.
local H = dofile(vim.g.contenox_test_dir .. '/helpers.lua')
local contenox = require('contenox')

local ws = H.make_workspace()
local notes = H.capture_notify()

test('setup with a missing server: actionable error, nothing enabled', function()
  local ok = contenox.setup({ cmd = { '/nonexistent/bin/contenox-lsp' } })
  H.eq(ok, false)
  local n = H.find(notes, function(x) return x.level == vim.log.levels.ERROR end)
  H.ok(n, 'an error notification')
  H.match(n.msg, '/nonexistent/bin/contenox%-lsp` was not found')
  H.match(n.msg, "setup{ cmd = ", 'says how to fix it')
  vim.cmd.edit(ws .. '/app.py')
  vim.wait(300)
  H.eq(#vim.lsp.get_clients({ name = 'contenox' }), 0, 'no client')
end)

test('commands without a server explain why instead of failing', function()
  for _, cmd in ipairs({ 'ContenoxExplainContext', 'ContenoxAsk hello', 'ContenoxNew hello', 'ContenoxPin', 'ContenoxUnpin', 'ContenoxStatus' }) do
    local before = #notes
    local ok, err = pcall(vim.cmd, cmd)
    H.ok(ok, cmd .. ' raised: ' .. tostring(err))
    H.eq(#notes, before + 1, cmd .. ' notifies once')
    H.match(notes[#notes].msg, 'was not found', cmd)
  end
  -- Without a question, :ContenoxNew needs no server: it only starts a new conversation id.
  local id = contenox.conversation_id()
  local before = #notes
  local ok, err = pcall(vim.cmd, 'ContenoxNew')
  H.ok(ok, 'ContenoxNew raised: ' .. tostring(err))
  H.eq(#notes, before + 1, 'ContenoxNew notifies once')
  H.match(notes[#notes].msg, 'new conversation')
  H.ok(contenox.conversation_id() ~= id, 'a new conversation id')
  H.eq(contenox.statusline(), '', 'empty statusline without a server')
  H.eq(#vim.api.nvim_list_wins(), 1, 'no float opened')
end)

test('a server that exits at once is reported by Neovim; commands stay usable', function()
  H.ok(contenox.setup({ cmd = { 'sh', '-c', 'echo contenox-boom >&2; exit 3' } }))
  vim.cmd.edit(ws .. '/util.py')
  H.wait_for(function()
    return H.find(notes, function(x) return x.msg:find('quit with exit code 3') end) ~= nil
  end, 10000, "Neovim's exit notification")
  vim.wait(200)
  local before = #notes
  H.ok(pcall(vim.cmd, 'ContenoxStatus'))
  H.eq(#notes, before + 1)
  H.match(notes[#notes].msg, 'no language server attached')
end)

_G.after_all = function()
  vim.fn.delete(ws, 'rf')
end
