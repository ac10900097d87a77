-- Contenox user commands. The language server itself is enabled by
-- `require('contenox').setup{}` (or `vim.lsp.enable('contenox')` with lsp/contenox.lua).
if vim.g.loaded_contenox then
  return
end
vim.g.loaded_contenox = true

if vim.fn.has('nvim-0.11') == 0 then
  vim.notify('Contenox: Neovim 0.11 or newer is required', vim.log.levels.ERROR)
  return
end

local function range_of(opts)
  if opts.range and opts.range > 0 then
    return { opts.line1, opts.line2 }
  end
  return nil
end

vim.api.nvim_create_user_command('ContenoxAsk', function(opts)
  local range = range_of(opts)
  local ask_opts = range and { range = { start = range[1] - 1, ['end'] = range[2] - 1 } } or {}
  if opts.bang then
    -- :ContenoxAsk! sends the unnamed register (a yanked traceback, a test run's output).
    local text = vim.fn.getreg('"')
    if vim.trim(text) == '' then
      require('contenox.util').notify('the unnamed register is empty: yank the test output first',
        vim.log.levels.WARN)
      return
    end
    ask_opts.outputs = { { kind = 'test', source = 'register', text = text } }
  end
  local question = vim.trim(opts.args or '')
  if question ~= '' then
    require('contenox').ask(question, ask_opts)
    return
  end
  vim.ui.input({ prompt = 'Ask Contenox: ' }, function(input)
    if input and vim.trim(input) ~= '' then
      require('contenox').ask(input, ask_opts)
    end
  end)
end, { nargs = '*', range = true, bang = true, desc = 'Contenox: ask about the code, continuing the conversation (streams into a float; <C-c> cancels); with !, the unnamed register goes along as test output' })

vim.api.nvim_create_user_command('ContenoxNew', function(opts)
  local range = range_of(opts)
  local ask_opts = range and { range = { start = range[1] - 1, ['end'] = range[2] - 1 } } or nil
  require('contenox').new_conversation(vim.trim(opts.args or ''), ask_opts)
end, { nargs = '*', range = true, desc = 'Contenox: start a new conversation (and ask the question, if given)' })

vim.api.nvim_create_user_command('ContenoxCancel', function()
  require('contenox').cancel()
end, { desc = 'Contenox: cancel the running ask' })

vim.api.nvim_create_user_command('ContenoxExplainContext', function()
  require('contenox').explain_context()
end, { desc = 'Contenox: show the context segments (tokens, cached/new)' })

vim.api.nvim_create_user_command('ContenoxPin', function(opts)
  require('contenox').pin({ range = range_of(opts) })
end, { range = true, desc = 'Contenox: pin this file (or the selected lines) into the context' })

vim.api.nvim_create_user_command('ContenoxUnpin', function(opts)
  require('contenox').unpin({ range = range_of(opts) })
end, { range = true, desc = "Contenox: unpin this file's pins (or those of the selected lines)" })

vim.api.nvim_create_user_command('ContenoxStatus', function()
  require('contenox').show_status()
end, { desc = 'Contenox: show the warm session status' })
